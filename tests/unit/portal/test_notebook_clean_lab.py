"""A clean JupyterLab: no "official Jupyter news" prompt (settings overrides), the server job's output out of the
home's top level (the Slurm spawner), and a "Portal" card in the launcher (a jupyter-server-proxy entry)."""

import json
import os
import stat
import subprocess
import sys
import warnings
from importlib.metadata import entry_points
from pathlib import Path
from unittest import mock
from xml.etree import ElementTree

import jsonschema
import pytest
from batchspawner.batchspawner import format_template
from jupyter_server_proxy.config import ServerProcess, make_handlers
from jupyterlab_server.settings_utils import get_settings

from bench import spawn
from bench.spawn import Run
from portal.config import PortalConfig, load
from portal.notebook import portal_launcher, portal_path_info, tensorboard_proxy
from spawners.slurm import PortalSlurmSpawner
from spawners.slurm_script import server_log_dir
from tests.conftest import REPO

OVERRIDES = REPO / "deploy" / "jupyterlab" / "dsportal.json"
LAB = Path(sys.prefix) / "share" / "jupyter" / "lab"
INSTALLED_OVERRIDES = LAB / "settings" / "overrides.d" / "dsportal.json"
NOTIFICATION = "@jupyterlab/apputils-extension:notification"


# --- no news prompt ---

def test_the_overrides_are_valid_settings_of_jupyterlabs_own_schemas():
    # JupyterLab applies an unknown key or a wrong type silently; the schema (additionalProperties: false) does not.
    for plugin, values in json.loads(OVERRIDES.read_text()).items():
        package, _, name = plugin.partition(":")
        schema = json.loads((LAB / "schemas" / package / f"{name}.json").read_text())
        jsonschema.validate(values, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"fetchNews": False}, schema)  # the setting is a string, "false"


def test_the_installed_overrides_are_the_repositorys_and_turn_the_news_prompt_off(tmp_path):
    """The venv's non-editable install puts the file there (setup.py's data_files); JupyterLab's own settings
    code then gives a user who has chosen nothing fetchNews "false": the prompt shows only for "none"."""
    assert INSTALLED_OVERRIDES.read_text() == OVERRIDES.read_text()
    result, _ = get_settings(str(LAB / "settings"), str(LAB / "schemas"), str(tmp_path), schema_name=NOTIFICATION)
    defaults = {key: prop["default"] for key, prop in result["schema"]["properties"].items()}
    assert defaults["fetchNews"] == "false" and defaults["checkForUpdates"] is False
    assert result["settings"] == {}  # the user's own choice, none here, would still win
    # The images install without -e: setup.py's data_files put the file there (tests/unit/test_packaging.py).


# --- the server job's output ---

def spawner(home: str, **traits) -> PortalSlurmSpawner:
    return PortalSlurmSpawner(portal=PortalConfig(), req_username="alice", req_homedir=home, req_keepvars="",
                              **traits)


def test_the_submit_command_makes_the_directory_private_quotes_an_odd_home_and_keeps_the_jobs_umask(tmp_path):
    """The real shell line, with a stand-in for sbatch that records what Slurm would get: the script on stdin and
    the umask (sbatch hands it to the job)."""
    home = tmp_path / "o'dd home $(touch pwned)"
    home.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sbatch = bin_dir / "sbatch"
    sbatch.write_text(f'#!/bin/sh\numask > {tmp_path}/umask\ncat > {tmp_path}/script\necho 42\n')
    sbatch.chmod(0o755)
    spawn_ = spawner(str(home))
    cmd = format_template(spawn_.batch_submit_cmd, **spawn_.get_req_subvars())

    out = subprocess.run(cmd, shell=True, input="#!/bin/bash\n", capture_output=True, text=True, check=True,
                         cwd=tmp_path, env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, preexec_fn=lambda: os.umask(0o022))
    assert out.stdout.strip() == "42"
    log_dir = Path(server_log_dir(str(home), "dsportal"))
    assert stat.S_IMODE(log_dir.stat().st_mode) == 0o700 and stat.S_IMODE((home / ".cache").stat().st_mode) == 0o700
    assert (tmp_path / "script").read_text() == "#!/bin/bash\n"
    assert (tmp_path / "umask").read_text().strip() == "0022"
    assert not (tmp_path / "pwned").exists() and not (home / "pwned").exists()


def test_the_spawn_benchmark_reads_the_portals_output_in_the_server_log_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(spawn.pwd, "getpwnam", lambda name: mock.Mock(pw_dir=str(tmp_path)))
    log_dir = Path(server_log_dir(str(tmp_path), load().cluster_name))  # the box's cluster: bench.spawn reads it
    log_dir.mkdir(parents=True)
    (log_dir / "jupyterhub_slurmspawner_7.log").write_text(
        "[I 2026-11-21 04:10:15.500 ServerApp] Jupyter Server 2.21.1 is running at:\n")
    (tmp_path / "jupyterhub_slurmspawner_7.log").write_text(
        "[I 2026-11-21 04:10:14.000 ServerApp] Jupyter Server 2.21.1 is running at:\n")  # stock's place
    lines = {"hub": ["[I 2026-11-21 04:10:12.740 JupyterHub batchspawner:287] Job submitted. output: 7"],
             "ctld": [], "slurmd": []}
    portal, stock = Run("portal", started=0.0, lab=1.0), Run("stock", started=0.0, lab=1.0)
    spawn.read_breakdown(portal, lines)
    spawn.read_breakdown(stock, lines)
    assert portal.listening - stock.listening == pytest.approx(1.5, abs=1e-6)


# --- the Portal card in JupyterLab's launcher ---

@pytest.mark.parametrize(("prefix", "base_url", "path_info"), [
    ("/user/alice/", "/", "../../services/portal/"),
    ("/jhub/user/alice/", "/jhub/", "../../services/portal/"),
    ("/jhub/user/alice/", "/jhub", "../../services/portal/"),
    ("/user/alice/gpu-box/", "/", "../../../services/portal/"),  # a named server
    ("", "/", None),  # not under a hub: no dashboard
    ("/user/alice/", "/jhub/", None),
])
def test_the_portal_card_links_to_the_dashboard_relative_to_the_server(prefix, base_url, path_info):
    assert portal_path_info(prefix, base_url) == path_info


def test_the_portal_entry_builds_opens_a_new_tab_and_registers_no_route_and_no_warning(monkeypatch):
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/jhub/user/alice/")
    monkeypatch.setenv("JUPYTERHUB_BASE_URL", "/jhub/")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        portal = ServerProcess(name="portal", **portal_launcher())
        other = ServerProcess(name="other", command=[])
        handlers = make_handlers("/jhub/user/alice/", [portal])
        make_handlers("/jhub/user/alice/", [other])
    assert portal.new_browser_tab and portal.launcher_entry.enabled and portal.launcher_entry.title == "Portal"
    assert portal.launcher_entry.path_info == "../../services/portal/"
    assert handlers == []  # nothing proxied: the dashboard is the hub's service
    assert [str(w.message).split(" does")[0] for w in caught] == ["Server proxy other"]  # only the portal's is quiet


def test_outside_a_hub_there_is_no_card(monkeypatch):
    monkeypatch.delenv("JUPYTERHUB_SERVICE_PREFIX", raising=False)
    assert ServerProcess(name="portal", **portal_launcher()).launcher_entry.enabled is False


def test_the_portal_entry_point_is_installed():
    found = {ep.name: ep.value for ep in entry_points(group="jupyter_serverproxy_servers")}
    assert found.get("portal") == "portal.notebook:portal_launcher"


@pytest.mark.parametrize("name, entry", [("portal", portal_launcher), ("tensorboard", tensorboard_proxy)])
def test_the_launcher_cards_have_icons_in_a_row_that_draws_them(monkeypatch, name, entry):
    """JupyterLab's launcher draws an entry's own icon only in its Notebook and Console rows."""
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/user/alice/")
    process = ServerProcess(name=name, **entry())
    assert process.launcher_entry.category in ("Notebook", "Console")
    icon = ElementTree.parse(process.launcher_entry.icon_path).getroot()
    assert icon.tag == "{http://www.w3.org/2000/svg}svg"
    assert icon.find("{http://www.w3.org/2000/svg}title").text == process.launcher_entry.title
