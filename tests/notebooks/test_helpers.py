"""The notebook helpers without a cluster: template installation never overwrites a user's file, the TensorBoard
proxy entry, the panel's URL, the AUROC table, and the spawner's environment and prologue."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import portal.templates
from portal import notebook
from portal.reference import CHEXNET_PAPER_AUROC, V100_IMAGES_PER_SEC, scaling_efficiency

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = sorted(path.name for path in (REPO / "notebooks").glob("*.ipynb"))


@pytest.fixture
def templates(tmp_path: Path) -> Path:
    source = tmp_path / "templates"
    source.mkdir()
    for name in ("01-a.ipynb", "02-b.ipynb"):
        (source / name).write_text(json.dumps({"template": name}))
    return source


def test_the_repository_has_the_templates_and_the_pytorch_twins():
    assert TEMPLATES == ["01-explore-chestxray14.ipynb", "02-train-chexnet-horovod.ipynb",
                         "02b-train-chexnet-pytorch.ipynb", "03-evaluate.ipynb", "04-scaling-study.ipynb",
                         "04b-scaling-study-pytorch.ipynb", "05-sweep.ipynb", "06-mlflow-runs.ipynb"]


def test_each_pytorch_twin_differs_from_its_original_in_words_and_its_program_only():
    """One code for both: a twin's code cells are its original's but for the parameter that names the program."""
    for original, twin in (("02-train-chexnet-horovod.ipynb", "02b-train-chexnet-pytorch.ipynb"),
                           ("04-scaling-study.ipynb", "04b-scaling-study-pytorch.ipynb")):
        code = [["".join(cell["source"]) for cell in json.loads((REPO / "notebooks" / name).read_text())["cells"]
                 if cell["cell_type"] == "code"] for name in (original, twin)]
        assert code[0][1:] == code[1][1:], twin
        assert 'template = "chexnet"' in code[0][0] and 'template = "chexnet-torch"' in code[1][0], twin


def test_every_template_starts_with_a_tagged_parameters_cell():
    for name in TEMPLATES:
        cells = json.loads((REPO / "notebooks" / name).read_text())["cells"]
        code = [cell for cell in cells if cell["cell_type"] == "code"]
        assert "parameters" in code[0]["metadata"].get("tags", []), name
        assert not any(cell.get("outputs") for cell in code), f"{name} is stored with outputs"


def test_install_copies_missing_templates(templates: Path, tmp_path: Path):
    dest = tmp_path / "home" / "notebooks"
    assert portal.templates.install_templates(templates, dest) == ["01-a.ipynb", "02-b.ipynb"]
    assert (dest / "02-b.ipynb").read_text() == (templates / "02-b.ipynb").read_text()


def test_install_never_overwrites_an_edited_notebook(templates: Path, tmp_path: Path):
    dest = tmp_path / "notebooks"
    portal.templates.install_templates(templates, dest)
    (dest / "01-a.ipynb").write_text("alice's edits")
    (templates / "01-a.ipynb").write_text("a newer template")
    assert portal.templates.install_templates(templates, dest) == []
    assert (dest / "01-a.ipynb").read_text() == "alice's edits"


def test_a_start_with_nothing_new_to_copy_writes_nothing(templates: Path, tmp_path: Path):
    """Every server start runs the install: with nothing new, it changes nothing in the home (not even the list's
    mtime), so a second cluster's servers beside a user's box leave their files as they were."""
    dest = tmp_path / "notebooks"
    portal.templates.install_templates(templates, dest)
    before = {path.name: path.stat().st_mtime_ns for path in dest.iterdir()}
    time.sleep(0.01)
    assert portal.templates.install_templates(templates, dest) == []
    assert {path.name: path.stat().st_mtime_ns for path in dest.iterdir()} == before


def test_install_leaves_a_file_the_user_made_before_the_first_install(templates: Path, tmp_path: Path):
    dest = tmp_path / "notebooks"
    dest.mkdir()
    (dest / "02-b.ipynb").write_text("mine")
    assert portal.templates.install_templates(templates, dest) == ["01-a.ipynb"]
    assert (dest / "02-b.ipynb").read_text() == "mine"


def test_a_deleted_template_is_not_brought_back_but_a_new_one_is_added(templates: Path, tmp_path: Path):
    dest = tmp_path / "notebooks"
    portal.templates.install_templates(templates, dest)
    (dest / "01-a.ipynb").unlink()
    (templates / "03-c.ipynb").write_text("{}")
    assert portal.templates.install_templates(templates, dest) == ["03-c.ipynb"]
    assert not (dest / "01-a.ipynb").exists()


def test_the_command_line_installs_and_reports(templates: Path, tmp_path: Path):
    dest = tmp_path / "notebooks"
    run = [sys.executable, "-m", "portal.notebook", "install-templates",
           "--source", str(templates), "--dest", str(dest)]
    first = subprocess.run(run, capture_output=True, text=True, cwd=REPO, check=True)
    again = subprocess.run(run, capture_output=True, text=True, cwd=REPO, check=True)
    assert "copied 2" in first.stdout and "copied 0" in again.stdout
    missing = subprocess.run([*run[:4], "--source", str(tmp_path / "nothing"), "--dest", str(dest)],
                             capture_output=True, text=True, cwd=REPO)
    assert missing.returncode == 1 and "no template directory" in missing.stderr


def test_tensorboard_proxy_serves_the_jobs_directory_under_its_own_path():
    entry = notebook.tensorboard_proxy()
    command = entry["command"]
    assert command[:3] == [sys.executable, "-m", "portal.tensorboard_socket"] and Path(command[0]).is_file()
    assert command[command.index("--logdir") + 1] == str(Path.home() / "jobs")
    assert command[command.index("--path_prefix") + 1] == "{base_url}tensorboard"
    assert command[command.index("--socket") + 1] == "{unix_socket}" and entry["unix_socket"] is True
    assert "--host" not in command and "{port}" not in command  # no TCP port: tests/unit/portal/test_tensorboard_socket
    assert entry["absolute_url"] is True and entry["launcher_entry"]["title"] == "TensorBoard"


def test_the_proxy_entry_point_is_registered():
    from importlib.metadata import entry_points

    found = {ep.name: ep.value for ep in entry_points(group="jupyter_serverproxy_servers")}
    assert found.get("tensorboard") == "portal.notebook:tensorboard_proxy"


def test_tensorboard_panel_uses_the_servers_base_url(monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    monkeypatch.setenv("JUPYTERHUB_BASE_URL", "/")
    job = SimpleNamespace(id="7", record=SimpleNamespace(user="alice", run_prefix="dsportal/7"))
    frame = notebook.tensorboard_panel(job, height=300)
    assert frame.src.startswith("/user/alice/tensorboard/?runFilter=%5Edsportal%2F7%2F") and frame.height == 300


def test_auroc_table_sits_beside_the_paper_and_marks_undefined_classes():
    table = notebook.auroc_table({"Atelectasis": 0.9, "Hernia": 0.5, "Edema": None})
    rows = {row.name: row for row in table.rows}
    assert len(rows) == 14 and rows["Atelectasis"].paper == CHEXNET_PAPER_AUROC["Atelectasis"]
    assert rows["Atelectasis"].difference == pytest.approx(0.9 - 0.8094)
    assert rows["Edema"].ours is None and "undefined" in str(table)
    assert table.mean.ours == pytest.approx(0.7)
    assert "<table" in table._repr_html_() and "Pleural_Thickening" in table._repr_html_()


def test_scaling_efficiency_of_the_published_v100_figures():
    efficiency = scaling_efficiency(V100_IMAGES_PER_SEC)
    assert efficiency[1] == 1.0
    assert efficiency[4] == pytest.approx(589.36 / (4 * 185.12))
    assert scaling_efficiency({}) == {}


def test_watch_prints_a_line_per_change_and_returns_the_final_state(capsys):
    states = iter(["PENDING", "RUNNING", "RUNNING", "COMPLETED"])
    epochs = iter([0, 1, 2])

    class FakeJob:
        id, spec = "9", SimpleNamespace(epochs=2)

        @property
        def state(self):
            return next(states)

        def metrics(self):
            return SimpleNamespace(epochs_done=next(epochs))

    assert notebook.watch(FakeJob(), poll=0) == "COMPLETED"
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("] ")[1] for line in lines] == [
        "job 9: PENDING, epoch 0/2", "job 9: RUNNING, epoch 0/2", "job 9: RUNNING, epoch 1/2",
        "job 9: COMPLETED, epoch 2/2"]


def test_the_spawner_copies_templates_and_proxies_percent_tensorboard_only_in_a_pod(monkeypatch):
    """`%tensorboard` starts a TensorBoard on a loopback port: a pod's loopback is the pod's, a Slurm node's is
    every job's on the node, so only the Kubernetes spawner tells it where the server's proxy reaches it."""
    from portal.config import PortalConfig
    from spawners.kubernetes import PortalKubeSpawner
    from spawners.options import tensorboard_proxy_url
    from spawners.slurm import PortalSlurmSpawner

    monkeypatch.setenv("DSPORTAL_CONFIG", os.environ.get("DSPORTAL_CONFIG", "/etc/dsportal/portal.yaml"))
    spawner = PortalSlurmSpawner()
    assert "-m portal.notebook install-templates" in spawner.req_prologue
    assert "TENSORBOARD_PROXY_URL" not in spawner.environment
    assert spawner.environment["DSPORTAL_CONFIG"] == os.environ["DSPORTAL_CONFIG"]
    in_a_pod = PortalKubeSpawner._environment_default(SimpleNamespace(portal=PortalConfig()))
    assert in_a_pod["TENSORBOARD_PROXY_URL"] is tensorboard_proxy_url
    fake = SimpleNamespace(user=SimpleNamespace(url="/user/alice/"))
    assert tensorboard_proxy_url(fake) == "/user/alice/proxy/%PORT%/"


def test_the_sites_server_environment_and_notebooks_dir_reach_both_spawners():
    """A second cluster sharing the homes (the tests' box) keeps JupyterLab's own files and the template copies in
    places of its own: {home} is the user's home as each spawner's server sees it."""
    from portal.config import PortalConfig
    from spawners.kubernetes import PortalKubeSpawner
    from spawners.slurm import PortalSlurmSpawner

    portal = PortalConfig(user_notebooks_dir=".cache/other/notebooks", cluster_name="other",
                          server_environment=("JUPYTERLAB_WORKSPACES_DIR={home}/.cache/other/lab", "A=b{c}"))
    slurm = PortalSlurmSpawner(portal=portal)
    found = {name: value(SimpleNamespace(req_homedir="/home/alice/")) if callable(value) else value
             for name, value in slurm.environment.items() if name in ("JUPYTERLAB_WORKSPACES_DIR", "A")}
    assert found == {"JUPYTERLAB_WORKSPACES_DIR": "/home/alice/.cache/other/lab", "A": "b{c}"}
    assert 'install-templates --dest "$HOME"/.cache/other/notebooks ||' in slurm.req_prologue
    assert slurm.environment["DSPORTAL_CLUSTER_NAME"] == "other"  # its notebooks' jobs: the cluster's directory
    kube = SimpleNamespace(portal=portal)  # KubeSpawner's defaults need only the settings (no API server here)
    environment = PortalKubeSpawner._environment_default(kube)
    assert environment["JUPYTERLAB_WORKSPACES_DIR"](kube) == "/home/jovyan/.cache/other/lab"
    assert environment["DSPORTAL_CLUSTER_NAME"] == "other"  # its notebooks' jobs: the cluster's directory
    hooks = PortalKubeSpawner._hooks_default(kube)
    assert "--dest /home/jovyan/.cache/other/notebooks" in hooks["postStart"]["exec"]["command"][2]


def test_templates_come_from_the_installed_copy_before_the_source_tree(tmp_path, monkeypatch):
    installed, source = tmp_path / "share", tmp_path / "src"
    source.mkdir()
    (source / "01-a.ipynb").write_text("{}")
    monkeypatch.setattr(portal.templates, "TEMPLATE_DIRS", (installed, source))
    assert portal.templates.templates_dir() == source  # nothing installed: an editable install's source tree
    installed.mkdir()
    (installed / "01-a.ipynb").write_text("{}")
    assert portal.templates.templates_dir() == installed
    monkeypatch.setattr(portal.templates, "TEMPLATE_DIRS", (tmp_path / "none",))
    with pytest.raises(FileNotFoundError, match="no template notebooks in .*none; reinstall dsportal"):
        portal.templates.templates_dir()
