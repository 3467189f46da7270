"""Issue 49: the box works from a checkout anywhere, root's mode-700 home included.

A clone of this checkout under a mode-700 directory is installed by the box's own step (install-package.sh) into a
throwaway venv that users can read; the box's check (deploy/local/parts/reach.py, the last step of `up`) then
proves, as alice, that a job's and a server's entry points import from the venv and never from the checkout. The
same clone installed editable (what the box did before) is refused by that check, naming the file alice could not
read. The venv borrows the shared venv's dependencies through a .pth file, so nothing is downloaded.
"""

import os
import shutil
import subprocess
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.local.parts import reach
from deploy.source_hash import source_hash
from deploy.supervise import BoxError
from tests.conftest import REPO

DSPORTAL = ("portal", "spawners", "chexnet")  # the distribution's packages (setup.py)
pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("demo_accounts")]  # alice, and no box


@pytest.fixture
def private_clone(tmp_path_factory) -> Path:
    """A clone of this checkout (its working tree as it is, committed or not) under a mode-700 directory."""
    private = tmp_path_factory.mktemp("root-home")
    private.chmod(0o700)
    clone = private / "repo"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(clone)], check=True, timeout=120)
    tracked = subprocess.run(["git", "-C", str(REPO), "ls-files", "-m", "-o", "--exclude-standard", "-z"],
                             capture_output=True, check=True, timeout=60).stdout.split(b"\0")
    for name in filter(None, tracked):  # the uncommitted state too: the clone is what is being tested
        source, target = REPO / name.decode(), clone / name.decode()
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
        elif target.is_file():  # deleted here, not yet in a commit
            target.unlink()
    return clone


@pytest.fixture
def readable_venv() -> Iterator[Path]:
    """A venv users can read (under /var/tmp: pytest's own temporary directories are mode 700), with the shared
    venv's dependencies behind its own (a .pth file), not its dsportal: installs are local. Removed afterwards."""
    place = Path(tempfile.mkdtemp(prefix="dsportal-test-venv.", dir="/var/tmp"))
    try:
        place.chmod(0o755)
        venv = place / "venv"
        subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True, timeout=120)
        own = next((venv / "lib").glob("python3*/site-packages"))
        # The shared venv's packages without its own copy of dsportal, which would hide a failed import.
        borrowed = place / "borrowed"
        borrowed.mkdir()
        for entry in Path(sysconfig.get_paths()["purelib"]).iterdir():
            if entry.name not in DSPORTAL and not entry.name.startswith(("dsportal-", "__editable__")):
                (borrowed / entry.name).symlink_to(entry)
        (own / "shared-venv.pth").write_text(f"{borrowed}\n")
        yield venv
    finally:
        shutil.rmtree(place)


def test_a_clone_under_a_mode_700_directory_installs_a_copy_alice_runs(private_clone, readable_venv):
    env = {**os.environ, "DSPORTAL_VENV": str(readable_venv)}
    installed = subprocess.run([private_clone / "deploy/local/install-package.sh"], env=env, capture_output=True,
                               text=True, timeout=600)
    assert installed.returncode == 0, installed.stderr
    record = reach.installed_record(readable_venv)
    assert record["source_hash"] == source_hash(private_clone), record
    assert record["checkout"] == str(private_clone), record
    found = reach.check_user_runs(readable_venv, "alice")
    assert all(path.startswith(f"{readable_venv}/") for path in found["modules"].values()), found
    assert found["templates"] == f"{readable_venv}/share/dsportal/notebooks", found
    assert not found["unreadable"], found
    # Again: a no-op while the clone is unchanged.
    again = subprocess.run([private_clone / "deploy/local/install-package.sh"], env=env, capture_output=True,
                           text=True, timeout=120)
    assert again.returncode == 0 and "installing" not in again.stdout, again.stdout


def test_an_editable_install_of_that_clone_is_refused_by_the_box_check_naming_the_file(private_clone,
                                                                                     readable_venv):
    subprocess.run([readable_venv / "bin/pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e",
                    str(private_clone)], check=True, capture_output=True, timeout=600)
    with pytest.raises(BoxError, match=r"alice cannot run what a job and a server run: .*Permission denied"):
        reach.check_user_runs(readable_venv, "alice")


def test_the_box_refuses_a_venv_whose_copy_is_not_this_checkouts(readable_venv):
    with pytest.raises(BoxError, match=r"has no non-editable dsportal of this checkout .*run `make install`"):
        reach.check_installed_copy(readable_venv)
    (readable_venv / "share/dsportal").mkdir(parents=True)
    (readable_venv / "share/dsportal/source.json").write_text('{"source_hash": "0000", "checkout": "/elsewhere"}')
    with pytest.raises(BoxError, match=r"installed from /elsewhere\) is not this checkout's .*`make install`"):
        reach.check_installed_copy(readable_venv)
