"""One registration per scheduler (portal.registrations): every class and spawner it names exists and says the same
name, every layer reads the table rather than a list of its own, and no product module outside a scheduler's own
files names a scheduler."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import os
import runpy
from pathlib import Path

import pytest

from portal.config import ConfigError, PortalConfig
from portal.records.ids import anchored
from portal.registrations import SCHEDULERS, server_schedulers, split
from portal.scheduler.registry import scheduler_class, scheduler_for
from tests.conftest import REPO

# Where a scheduler's name may be written: its own package or module, its spawner, the registration, and one place
# that says why.
OWN_FILES = {name: (f"portal/scheduler/{name}/", f"portal/scheduler/{name}.py", f"spawners/{name}.py")
             for name in SCHEDULERS}
ALSO_ALLOWED = {
    "portal/registrations.py": "the registration itself",
    "portal/config.py": "the `scheduler` setting's default and each scheduler's own settings (slurm_conf's path)",
}
# "local" is also a plain word (a login's address, portal.login_limits): only the names that are no plain words.
NAMES = [name for name in SCHEDULERS if name != "local"]


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_each_registered_class_and_spawner_exists_and_answers_to_its_name(name):
    registered, cls = SCHEDULERS[name], scheduler_class(name)
    assert cls.name == name and cls.records_in_home is registered.records_in_home
    assert cls.job_ids.pattern == anchored(registered.job_ids).pattern
    if registered.spawner:
        module, cls = split(registered.spawner)
        assert getattr(importlib.import_module(module), cls).portal_scheduler == name


def test_the_scheduler_setting_takes_the_schedulers_with_a_spawner_and_names_them_when_refused():
    assert server_schedulers() == ("slurm", "kubernetes")
    with pytest.raises(ConfigError, match="scheduler is 'local'; allowed: slurm, kubernetes"):
        PortalConfig(scheduler="local")


def test_where_servers_reach_the_hub_follows_the_registration(monkeypatch):
    assert PortalConfig(scheduler="slurm").hub_api_address == PortalConfig().box_gateway
    assert PortalConfig(scheduler="kubernetes").hub_api_address == "127.0.0.1"
    at_gateway = dataclasses.replace(SCHEDULERS["kubernetes"], hub_api_at_gateway=True)
    monkeypatch.setitem(SCHEDULERS, "kubernetes", at_gateway)
    assert PortalConfig(scheduler="kubernetes").hub_api_address == PortalConfig().box_gateway


def test_a_fake_clusters_answers_go_to_the_schedulers_that_run_commands():
    def answers(argv) -> str:
        raise AssertionError(argv)

    assert scheduler_for(PortalConfig(), "slurm", run=answers).commands.fake is answers  # type: ignore[attr-defined]
    assert scheduler_for(PortalConfig(), "local", run=answers).name == "local"  # it takes none: made without


def named_schedulers(path: Path) -> list[tuple[int, str]]:
    """(line, name) of each string in the module that is exactly a scheduler's name."""
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and node.value in NAMES]


def test_no_product_module_names_a_scheduler_outside_its_own_files():
    found = []
    for path in [*sorted((REPO / "portal").rglob("*.py")), *sorted((REPO / "spawners").rglob("*.py")),
                 REPO / "jupyterhub_config.py"]:
        relative = path.relative_to(REPO).as_posix()
        if relative in ALSO_ALLOWED:
            continue
        for line, name in named_schedulers(path):
            if not relative.startswith(OWN_FILES[name]):
                found.append(f"{relative}:{line} names {name!r}")
    assert not found, "\n".join(found)


def test_the_scan_finds_a_name_written_where_it_does_not_belong(tmp_path):
    module = tmp_path / "elsewhere.py"
    module.write_text('if cfg.scheduler == "kubernetes":\n    pass\n')
    assert named_schedulers(module) == [(1, "kubernetes")]


@pytest.mark.parametrize("name", server_schedulers())
def test_the_hubs_config_takes_the_spawner_that_the_scheduler_registered(name, monkeypatch, tmp_path):
    from traitlets.config import Config

    monkeypatch.setenv("DSPORTAL_SCHEDULER", name)
    monkeypatch.setenv("DSPORTAL_K8S_KUBECONFIG", str(tmp_path / "kubeconfig"))
    monkeypatch.setenv("KUBECONFIG", "before")  # restored afterwards: the config sets it for the spawner's client
    config = Config()
    runpy.run_path(str(REPO / "jupyterhub_config.py"), init_globals={"get_config": lambda: config})
    assert config.JupyterHub.spawner_class.portal_scheduler == name
    assert os.environ["KUBECONFIG"] == str(tmp_path / "kubeconfig")
