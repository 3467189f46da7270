"""The seam for training programs (portal.records.programs): a program is its own package and one registration.

The toy third program below lives in a temporary directory, registered the way REGISTERED registers the two real
ones (its declaration module's name): the spec, the job scripts of every scheduler, the records and the form take
it with no change anywhere else."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from portal.config import PortalConfig
from portal.quota import GpuQuota
from portal.records import programs as programs_module
from portal.records.limits import JobLimits
from portal.records.programs import REGISTERED, ProgramError, load_program, registry
from portal.records.record import recorded_spec
from portal.records.spec import JobSpecError, input_fields, parse_job_spec
from portal.scheduler.local import render_local
from portal.scheduler.slurm.sbatch import render_sbatch
from portal.service.submit_form import form_spec
from tests.conftest import TOY as SITE_TOY

CFG = PortalConfig()
LIMITS = JobLimits(partition="gpu", nodes=2, gpus_per_node=4, cpus_per_node=8, memory_gb_per_node=20,
                   max_minutes=None, quota=GpuQuota(4, ("gpu-users",), ()), default_data_dir="/data")
TOY = '''
"""A toy training program: only its declaration and its arguments."""
NAME = "toy"
TITLE = "Toy"
DESCRIPTION = "a program registered by a test"
MODULE = "toyprog.train"
LAUNCHER = "torchrun"
VENV = "/opt/toy-venv"
FIELDS = (
    {"name": "model", "kind": "choice", "choices": ("small", "large"), "default": "small", "label": "Model"},
    {"name": "depth", "kind": "int", "low": 1, "high": 9, "default": 2, "label": "Depth", "help": "layers"},
    {"name": "noisy", "kind": "bool", "default": False, "label": "Noisy"},
)
ARGS_TEMPLATE = "toy-args.sh"
'''
TOY_ARGS = ('train_args=(--data {{ spec.data_dir | q }} --depth {{ options.depth }}'
            '{% if options.noisy %} --noisy{% endif %})\n')


@pytest.fixture()
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    package = tmp_path / "toyprog"
    (package / "templates").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "program.py").write_text(textwrap.dedent(TOY))
    (package / "templates" / "toy-args.sh").write_text(TOY_ARGS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(programs_module, "REGISTERED", (*REGISTERED, "toyprog.program"))  # one line registers it
    programs_module._registered.cache_clear()
    yield registry()
    monkeypatch.undo()
    programs_module._registered.cache_clear()
    for name in [name for name in sys.modules if name == "toyprog" or name.startswith("toyprog.")]:
        del sys.modules[name]


def parse(raw: dict) -> object:
    return parse_job_spec(raw, LIMITS, user_can_read=lambda path: True)


def test_the_two_programs_are_registered_in_order():
    programs = registry()
    # then the site's, the test boxes' settings register the toy (tests/conftest.py), from their site directory: its
    # MODULE, ".", names its own package there
    assert programs.names == ("chexnet", "chexnet-torch", SITE_TOY) and programs.default.name == "chexnet"
    assert programs.get(SITE_TOY).module == "toyprogram" and programs.get(SITE_TOY).launcher == "toyrun"
    assert programs.get("chexnet").launcher == "horovod" and programs.get("chexnet-torch").launcher == "torchrun"
    assert programs.get("chexnet-torch").python(Path("/opt/dsportal/venv")) == "/opt/dsportal/torch-venv/bin/python"
    assert programs.get("chexnet").python(Path("/opt/dsportal/venv")) == "/opt/dsportal/venv/bin/python"


def test_a_toy_program_needs_only_its_package_and_one_registration(toy):
    spec = parse({"template": "toy", "depth": "5", "noisy": True, "model": "large", "nodes": 2})
    assert (spec.model, spec.option("depth"), spec.option("noisy")) == ("large", 5, True)
    assert spec.to_dict()["depth"] == 5 and "fp16" not in spec.to_dict()
    assert recorded_spec(spec.to_dict()) == spec  # its record reads back whole
    script = render_sbatch(spec, "/home/alice/jobs/%j", CFG, "gpu")
    assert "-m toyprog.train" in script and "--depth 5 --noisy" in script and "/opt/toy-venv/bin/torchrun" in script
    assert "--nnodes=2" in script and "--rdzv-conf=store_type=file" in script
    local = render_local(spec, "/home/alice/jobs/local-1", CFG)
    assert '"${rendezvous[@]}"' in local and "--data /data --depth 5 --noisy" in local
    assert {"depth", "noisy"} <= set(input_fields())
    posted = form_spec({"template": [b"toy"], "toy.depth": [b"3"], "toy.noisy": [b"on"], "chexnet.fp16": [b"on"]})
    # Another program's fields are left out (a browser sends them all).
    assert posted == {"template": "toy", "depth": "3", "noisy": True, "mail": False}


def test_a_program_checks_its_own_fields_and_refuses_the_others(toy):
    with pytest.raises(JobSpecError, match="depth: 10 is out of range; allowed: 1-9") as err:
        parse({"template": "toy", "depth": 10})
    assert err.value.field == "depth"
    with pytest.raises(JobSpecError, match="fp16: is not a field of the program toy; its own fields: model, depth"):
        parse({"template": "toy", "fp16": True})
    with pytest.raises(JobSpecError, match="amp: is not a field of the program chexnet;"):
        parse({"amp": "bf16"})
    with pytest.raises(JobSpecError, match="model: 'densenet121' is not offered by toy; allowed: small, large"):
        parse({"template": "toy", "model": "densenet121"})


def test_the_torch_program_takes_its_precision_and_layout():
    spec = parse({"template": "chexnet-torch", "amp": "bf16", "channels_last": "on", "nodes": 2, "gpus_per_node": 2})
    assert dict(spec.options) == {"amp": "bf16", "channels_last": "on"} and not spec.fp16
    script = render_sbatch(spec, "/home/alice/jobs/%j", CFG, "gpu")
    assert "--amp bf16 --channels-last on" in script and "-m chexnet_torch.train" in script
    assert "#SBATCH --ntasks-per-node=1" in script and "--nproc-per-node=2" in script


def test_a_scheduler_without_a_job_script_for_the_programs_launcher_refuses_it_by_name(toy):
    from dataclasses import replace

    from portal.records.templating import programs_with

    assert programs_with("sbatch") == ("chexnet", "chexnet-torch", "toy", SITE_TOY)  # the site's after the portal's
    assert programs_with("mpijob.sh") == ("chexnet",)  # the MPI Operator's shape is Horovod's alone
    only_horovod = replace(LIMITS, programs=programs_with("mpijob.sh"))
    with pytest.raises(JobSpecError, match="template: toy cannot run in partition gpu: its launcher .torchrun. has no "
                                           "job script for this scheduler yet; allowed: chexnet") as err:
        parse_job_spec({"template": "toy"}, only_horovod, user_can_read=lambda path: True)
    assert err.value.field == "template"
    assert parse_job_spec({}, only_horovod, user_can_read=lambda path: True).template == "chexnet"


@pytest.mark.parametrize(("declaration", "said"), [
    ('NAME = "Bad Name"', "NAME is lower-case letters"),
    ('NAME = "réseau"', "NAME is lower-case letters"),  # ASCII only: the pattern its launchers' lines are read by
    ('LAUNCHER = "ssh"', "LAUNCHER 'ssh' is not a registered launcher (horovod, torchrun, toyrun: "
                         "portal.records.launchers, site_launchers)"),
    ('FIELDS = ({"name": "depth", "kind": "int", "low": 1, "high": 9, "default": 2, "label": "Depth"},)',
     "FIELDS must declare its models"),
    ('ARGS_TEMPLATE = "missing.sh"', "missing.sh is not a file"),
    ('MODULE = "...beyond"', "MODULE '...beyond' is not a module's name"),  # above its package's top
    ('MODULE = "toy train"', "MODULE 'toy train' is not a module's name"),
    ('FIELDS = ({"name": "model", "kind": "choice", "choices": ("a",), "default": "b", "label": "M"},)',
     "a choice needs choices"),
])
def test_a_broken_declaration_is_refused_naming_the_module(toy, tmp_path, declaration, said):
    (tmp_path / "toyprog" / "broken.py").write_text(textwrap.dedent(TOY) + declaration + "\n")
    with pytest.raises(ProgramError, match="training program toyprog.broken") as err:
        load_program("toyprog.broken")
    assert said in str(err.value)
