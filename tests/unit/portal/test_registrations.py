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
from portal.scheduler.registry import scheduler_class
from tests.conftest import REPO

# Where a scheduler's name may be written: its own package or module, its spawner, the registration, and one place
# that says why.
OWN_FILES = {name: (f"portal/scheduler/{name}/", f"portal/scheduler/{name}.py", f"spawners/{name}.py",
                    f"spawners/{name}_", *(tool.replace(".", "/") + ".py" for tool in registered.tools))
             for name, registered in SCHEDULERS.items()}
ALSO_ALLOWED = {
    "portal/registrations.py": "the registration itself",
    "portal/config/__init__.py": "the `scheduler` setting's default and each scheduler's own settings (slurm_conf's "
                                 "path)",
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


def named_schedulers(path: Path) -> list[tuple[int, str]]:
    """(line, name) of each string in the module that is exactly a scheduler's name."""
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and node.value in NAMES]


def test_no_product_module_names_a_scheduler_outside_its_own_files():
    found = []
    for path in product_modules():
        relative = path.relative_to(REPO).as_posix()
        if relative in ALSO_ALLOWED:
            continue
        for line, name in named_schedulers(path):
            if not relative.startswith(OWN_FILES[name]):
                found.append(f"{relative}:{line} names {name!r}")
    assert not found, "\n".join(found)


def product_modules() -> list[Path]:
    return [*sorted((REPO / "portal").rglob("*.py")), *sorted((REPO / "spawners").rglob("*.py")),
            REPO / "jupyterhub_config.py"]


# PortalConfig takes in each scheduler's own section of the settings (portal.scheduler.<name>.settings: of the
# settings' layer, importing nothing of its scheduler's), and nothing else of a scheduler's.
SETTINGS_FILE, SETTINGS_SECTION = "portal/config/__init__.py", "settings"


def imported_schedulers(path: Path, allowed: str = "") -> list[tuple[int, str]]:
    """(line, name) of each import of a scheduler's module in the module: at its top, inside a function or under
    TYPE_CHECKING alike (`import portal.scheduler.slurm.x`, `from portal.scheduler.slurm import x`,
    `from portal.scheduler import slurm`); but `portal.scheduler.<name>.<allowed>`, the section of the settings."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        for module in modules:
            parts = module.split(".")
            if parts[:2] == ["portal", "scheduler"] and len(parts) > 2 and parts[2] in SCHEDULERS \
                    and not (allowed and parts[3:4] == [allowed]):
                found.append((node.lineno, parts[2]))
    return sorted(set(found))


def test_no_product_module_imports_a_schedulers_code_outside_its_own_files():
    """The scheduler-neutral code (the job API, the dashboard, the records, the settings, the hub's configuration)
    reaches a scheduler only through the protocol and the registry: a scheduler's package is imported by itself,
    its spawner's modules and the commands its registration names (`tools`), nowhere else."""
    found = []
    for path in product_modules():
        relative = path.relative_to(REPO).as_posix()
        found += [f"{relative}:{line} imports portal.scheduler.{name}"
                  for line, name in imported_schedulers(path, SETTINGS_SECTION if relative == SETTINGS_FILE else "")
                  if not relative.startswith(OWN_FILES[name])]
    assert not found, "\n".join(found)


def test_the_import_scan_finds_an_import_in_a_function_and_under_type_checking(tmp_path):
    module = tmp_path / "elsewhere.py"
    module.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from portal.scheduler.slurm import x\n"
                      "def f():\n    import portal.scheduler.kubernetes.client\n"
                      "from portal.scheduler import local, registry\nfrom portal.scheduler.cluster import QueuedJob\n")
    assert imported_schedulers(module) == [(3, "slurm"), (5, "kubernetes"), (6, "local")]


@pytest.mark.parametrize("name", [name for name in SCHEDULERS if SCHEDULERS[name].tools])
def test_each_registered_tool_of_a_scheduler_is_a_module_that_runs_as_a_command(name):
    for tool in SCHEDULERS[name].tools:
        assert "__main__" in (REPO / (tool.replace(".", "/") + ".py")).read_text(), tool


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
