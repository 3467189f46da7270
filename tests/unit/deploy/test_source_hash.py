"""deploy/source_hash.py: the fingerprint of what users' processes run, which install-package.sh installs by."""

from pathlib import Path

from deploy.source_hash import SOURCES, source_files, source_hash

REPO = Path(__file__).resolve().parents[3]


def tree(root: Path) -> Path:
    for name, text in {"setup.py": "setup()", "portal/__init__.py": "", "chexnet/train.py": "x = 1",
                       "notebooks/train.ipynb": "{}", "deploy/jupyterlab/dsportal.json": "{}",
                       "deploy/local/box.py": "# the box itself is not what users run"}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_a_change_to_any_source_changes_the_fingerprint_and_caches_do_not(tmp_path):
    root = tree(tmp_path)
    first = source_hash(root)
    (root / "portal/__pycache__").mkdir()
    (root / "portal/__pycache__/x.cpython-311.pyc").write_bytes(b"\0")
    (root / "deploy/local/box.py").write_text("# changed: not a source of the distribution")
    assert source_hash(root) == first
    (root / "chexnet/train.py").write_text("x = 2")
    assert source_hash(root) != first
    (root / "chexnet/train.py").write_text("x = 1")
    assert source_hash(root) == first
    (root / "chexnet/train.py").rename(root / "chexnet/train2.py")  # a rename is a change
    assert source_hash(root) != first


def test_the_fingerprint_covers_setup_pys_packages_and_data_files():
    """What setup.py builds the distribution from (packages, package_data, data_files) is what SOURCES lists."""
    setup = (REPO / "setup.py").read_text()
    for package in ("portal", "spawners", "chexnet"):
        assert f'"{package}"' in setup and package in SOURCES
    assert "notebooks/*.ipynb" in setup and "notebooks" in SOURCES
    assert "deploy/jupyterlab/dsportal.json" in setup and "deploy/jupyterlab" in SOURCES
    names = {p.relative_to(REPO).as_posix() for p in source_files(REPO)}
    assert "chexnet/train.py" in names and "spawners/singleuser.py" in names and "setup.py" in names
