"""A non-editable install (the images in docker/ use one) carries every file the code opens, not only .py files."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def tracked(*patterns: str) -> set[str]:
    out = subprocess.run(["git", "ls-files", *patterns], cwd=REPO, capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_the_wheel_has_every_module_the_job_scripts_the_dashboard_pages_and_the_notebooks(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path), str(REPO)], check=True, capture_output=True, timeout=120)
    (wheel,) = tmp_path.glob("dsportal-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    # Every module of the product's packages: a directory without __init__.py imports from a checkout (a namespace
    # package) but find_packages leaves it out of the install that users' jobs run.
    modules = {name for name in tracked("portal", "spawners", "programkit", "chexnet", "chexnet_torch")
               if name.endswith(".py")}
    assert modules <= names, sorted(modules - names)
    assert tracked("portal/records/templates", "portal/service/templates", "portal/service/hub_templates",
                   "portal/service/static", "chexnet/templates", "chexnet_torch/templates") <= names
    notebooks = {name.split("/")[-1] for name in names if "/share/dsportal/notebooks/" in name}
    assert notebooks == {Path(name).name for name in tracked("notebooks/*.ipynb")}
    assert len(notebooks) == 8  # six templates and the two PyTorch twins
    # JupyterLab's setting defaults (no news prompt) land in <prefix>/share/jupyter/lab/settings/overrides.d.
    assert any(name.endswith(".data/data/share/jupyter/lab/settings/overrides.d/dsportal.json") for name in names)


def test_the_hub_side_imports_without_the_training_stack():
    """The hub's image has no numpy, TensorFlow or torch (docker/hub/Dockerfile checks these imports as its last
    step): a module of the hub side that reaches a training program's module needing them at load breaks the image
    build (programkit.sweep reaching programkit.tags -> programkit.labels -> numpy did, at stop 56)."""
    blocked = ("numpy", "tensorflow", "torch", "horovod", "sklearn", "PIL")
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        f"        if name.split('.')[0] in {blocked!r}:\n"
        "            raise ImportError(f'{name} is not in the hub image')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import portal.auth, portal.service, spawners.slurm, spawners.kubernetes\n"
        "import portal.scheduler.slurm.scheduler, portal.scheduler.kubernetes.scheduler, portal.jobs\n"
    )
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                           cwd=Path(__file__).resolve().parents[2])
    assert found.returncode == 0, found.stderr[-3000:]
