"""The seam for launchers (portal.records.launchers): a launcher is its declaration, its job scripts and its
Kubernetes builder, and one registration.

The toy third launcher below lives in a temporary directory with a toy program that names it, each registered the
way REGISTERED registers the real ones (one line each): Slurm, the local runner and Kubernetes start it with no
change anywhere else, and a scheduler without its kind of script refuses it by name."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from portal.config import PortalConfig
from portal.records import launchers as launchers_module
from portal.records import programs as programs_module
from portal.records.launchers import LauncherError, launchers, load_launcher
from portal.records.spec import JobSpecError, parse_job_spec
from portal.records.templating import programs_on_kubernetes, programs_with
from portal.scheduler.kubernetes.jobs import job_objects
from portal.scheduler.kubernetes.records import limits_for
from portal.scheduler.kubernetes.scheduler import KubernetesScheduler
from portal.scheduler.local import render_local
from portal.scheduler.slurm.sbatch import render_sbatch
from tests.unit.helpers import K8S_CFG, SPEC_DATA_DIR, bash_syntax_ok
from tests.unit.helpers import SPEC_LIMITS as LIMITS

CFG = PortalConfig()
LAUNCHER = '''
"""A toy launcher: one `pairrun` per node, declared, scripted and built in this folder."""
NAME = "pairrun"
TEMPLATES = "templates"
KUBERNETES = "toylaunch.kube:toy_objects"
LAUNCHER_POD = True
'''
KUBE = '''
from portal.scheduler.kubernetes.manifests import job_metadata


def toy_objects(spec, job_id, user, cfg, partition, *, plain, submitted_at="", keys=None):
    record = {"apiVersion": "batch/v1", "kind": "Job", "metadata": job_metadata(spec, job_id, user, cfg, submitted_at),
              "spec": {"parallelism": spec.nodes, "template": {"spec": {"containers": [{"name": "node"}]}}}}
    return record, []
'''
SCRIPTS = {
    "pairrun.sbatch": ('#!/bin/bash\n#SBATCH --nodes={{ spec.nodes | sbatch }}\n{% include program.include() %}\n'
                      'srun {{ (program_bin ~ "/pairrun") | q }} {{ python | q }} -m {{ program.module }} '
                      '"${train_args[@]}"\n'),
    "pairrun.local.sh": ('#!/bin/bash\n{% include program.include() %}\n'
                        '{{ (program_bin ~ "/pairrun") | q }} {{ python | q }} -m {{ program.module }} '
                        '"${train_args[@]}"\n'),
}
PROGRAM = '''
NAME = "toy"
TITLE = "Toy"
DESCRIPTION = "a program started by the toy launcher"
MODULE = "toylaunch.train"
LAUNCHER = "pairrun"
VENV = "/opt/toy-venv"
FIELDS = ({"name": "model", "kind": "choice", "choices": ("small",), "default": "small", "label": "Model"},)
ARGS_TEMPLATE = "toy-args.sh"
'''


@pytest.fixture()
def toy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    package = tmp_path / "toylaunch"
    (package / "templates").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "launcher.py").write_text(textwrap.dedent(LAUNCHER))
    (package / "kube.py").write_text(textwrap.dedent(KUBE))
    (package / "program.py").write_text(textwrap.dedent(PROGRAM))
    (package / "templates" / "toy-args.sh").write_text("train_args=(--data {{ spec.data_dir | q }})\n")
    for name, text in SCRIPTS.items():
        (package / "templates" / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    # One line registers each.
    monkeypatch.setattr(launchers_module, "REGISTERED", (*launchers_module.REGISTERED, "toylaunch.launcher"))
    monkeypatch.setattr(programs_module, "REGISTERED", (*programs_module.REGISTERED, "toylaunch.program"))
    launchers_module._registered.cache_clear()
    programs_module._registered.cache_clear()
    yield package
    monkeypatch.undo()
    launchers_module._registered.cache_clear()
    programs_module._registered.cache_clear()
    for name in [name for name in sys.modules if name == "toylaunch" or name.startswith("toylaunch.")]:
        del sys.modules[name]


def test_the_two_launchers_are_registered_and_only_horovods_runs_bring_a_pod_of_their_own():
    # then the site's: the test boxes' settings register the toy program's launcher (tests/conftest.py)
    assert launchers().names == ("horovod", "torchrun", "toyrun") and launchers().with_launcher_pod() == ("horovod",)
    assert launchers().get("horovod").has("mpijob.sh") and not launchers().get("torchrun").has("mpijob.sh")
    # the site's declares its builder relative to its package (".kube:toy_job_objects"), wherever that is installed
    assert launchers().get("toyrun").kubernetes == "toyprogram.kube:toy_job_objects"


def test_a_toy_launcher_needs_its_folder_and_one_registration_on_every_scheduler(toy):
    spec = parse_job_spec({"template": "toy", "nodes": 2}, LIMITS, user_can_read=lambda path: True)
    script = render_sbatch(spec, "/home/alice/jobs/%j", CFG, "gpu")
    assert "#SBATCH --nodes=2" in script and f"train_args=(--data {SPEC_DATA_DIR})" in script
    assert 'srun /opt/toy-venv/bin/pairrun /opt/toy-venv/bin/python -m toylaunch.train "${train_args[@]}"' in script
    bash_syntax_ok(render_local(spec, "/home/alice/jobs/local-1", CFG))
    record, fence, *owned = job_objects(K8S_CFG, spec, "k8s-9", "alice", "v100", plain=True)
    assert record["metadata"]["name"] == "k8s-9" and record["spec"]["parallelism"] == 2 and owned == []
    assert fence["kind"] == "NetworkPolicy"
    # Kubernetes runs it (it names a builder), where the site runs MPIJobs not (it has no mpijob.sh); its pod of its
    # own is weighed with its runs.
    assert "toy" in programs_on_kubernetes(False) and "toy" not in programs_on_kubernetes(True)
    limits = limits_for(K8S_CFG, (), [])
    assert "toy" in limits.programs and "pairrun" in limits.launcher_for
    with pytest.raises(JobSpecError, match=r"sweep: toy's launcher \(pairrun\) has no trial script for Kubernetes"):
        KubernetesScheduler(K8S_CFG).check_sweep(spec)  # its sweeps: it has no k8s-trial.sh


def test_a_scheduler_without_the_launchers_script_refuses_its_program_by_name(toy):
    from dataclasses import replace

    assert "toy" not in programs_with("k8s-trial.sh") and "toy" in programs_with("local.sh")
    mpijobs = replace(LIMITS, programs=programs_on_kubernetes(True))
    with pytest.raises(JobSpecError, match=r"template: toy cannot run in partition gpu: its launcher .pairrun. has "
                                           r"no job script for this scheduler yet; allowed: chexnet"):
        parse_job_spec({"template": "toy"}, mpijobs, user_can_read=lambda path: True)


@pytest.mark.parametrize(("declaration", "said"), [
    ('NAME = "Toy Run"', "NAME is a lower-case word"),
    ('KUBERNETES = "no builder"', 'KUBERNETES is "module:function"'),
    ('KUBERNETES = "...beyond:build"', "KUBERNETES is \"module:function\"; got '...beyond:build'"),  # above the top
    ("LAUNCHER_POD = 'yes'", "LAUNCHER_POD true or false"),
    ('TEMPLATES = "elsewhere"', "holds no job script pairrun.*"),
])
def test_a_broken_declaration_is_refused_naming_the_module(toy, declaration, said):
    (toy / "broken.py").write_text(textwrap.dedent(LAUNCHER) + declaration + "\n")
    with pytest.raises(LauncherError, match=said) as err:
        load_launcher("toylaunch.broken")
    assert "launcher toylaunch.broken" in str(err.value)
