"""portal.errors: one tree for every error the hub side raises, each kind with its HTTP status, the scheduler named
in the words a user sees."""

from __future__ import annotations

import ast
import importlib
import re

import pytest

from portal import errors
from portal.scheduler.errors import NoAccounting, UnknownScheduler
from portal.scheduler.kubernetes.errors import KubernetesError, kubernetes_failure
from portal.scheduler.slurm.errors import JobDirError, SlurmRefused, SlurmUnavailable
from tests.conftest import REPO

HUB_SIDE = ("portal", "spawners")


def exception_classes() -> list[tuple[str, str]]:
    """(module, class) of every class in the hub side's modules whose bases name an error or exception."""
    found = []
    for package in HUB_SIDE:
        for path in sorted((REPO / package).rglob("*.py")):
            module = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.ClassDef) and any(
                        re.search(r"(Error|Exception|Refused|Unavailable|NotFound|Forbidden|Busy|Untrusted|"
                                  r"Misconfigured|BadAnswer|UserStorage)$", ast.unparse(base)) for base in node.bases):
                    found.append((module, node.name))
    return found


def test_every_error_of_the_hub_side_is_in_the_tree():
    classes = exception_classes()
    assert ("portal.service.board", "SubmitInProgress") in classes and len(classes) > 30  # the walk finds them
    outside = [f"{module}.{name}" for module, name in classes
               if not issubclass(getattr(importlib.import_module(module), name), errors.PortalError)
               and name != "UserError"]  # the dashboard's HTTP error: what the tree is mapped to
    assert not outside, f"errors that do not derive from portal.errors.PortalError: {outside}"


def test_the_tree_in_the_docstring_is_the_classes_statuses():
    table = re.findall(r"^\s*[├└│ ─]*(\w+)\s+(\d{3})\s", errors.__doc__, re.M)
    assert len(table) >= 12
    for name, status in table:
        where = errors if hasattr(errors, name) else importlib.import_module("portal.scheduler.errors")
        assert getattr(where, name).http_status == int(status), name


@pytest.mark.parametrize(("err", "status", "said"), [
    (errors.JobNotFound("job 7: not found"), 404, "job 7: not found"),
    (SlurmUnavailable("sbatch did not answer in 60 s"), 503, "Slurm is unavailable: sbatch did not answer"),
    (SlurmRefused("Invalid account"), 503, "Slurm is unavailable: Invalid account"),
    (JobDirError("preparing /home/a/jobs/5 failed: No space left"), 507, "your job directory could not be prepared"),
    (kubernetes_failure("create pod", 0, "connection refused"), 503, "the Kubernetes API did not answer"),
    (kubernetes_failure("create pod", 403, "exceeded quota"), 400, "the Kubernetes API refused create pod: 403"),
    (kubernetes_failure("create pod", 500, "etcd"), 503, "could not answer create pod now: 500"),
    (UnknownScheduler("scheduler: 'pbs' is not a scheduler"), 400, "'pbs' is not a scheduler"),
    (NoAccounting("Kubernetes keeps no accounting"), 501, "keeps no accounting"),
])
def test_each_kind_answers_its_status_and_names_the_scheduler_that_failed(err, status, said):
    answered = errors.answer(err)
    assert answered is not None and answered[0] == status and said in answered[1], answered
    assert isinstance(err, errors.PortalError)


def test_a_scheduler_of_its_own_is_named_in_its_outage():
    class FluxError(errors.SchedulerUnavailable):
        scheduler = "Flux"

    assert errors.answer(FluxError("flux-core did not answer")) == (
        503, "Flux is unavailable: flux-core did not answer", None)
    assert KubernetesError("x").scheduler == "Kubernetes"


def test_what_is_no_portal_error_is_a_bug():
    assert errors.answer(RuntimeError("a bug")) is None and errors.answer(KeyError("x")) is None
