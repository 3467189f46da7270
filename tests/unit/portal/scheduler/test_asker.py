"""Waiting for a job rides through a scheduler that does not answer for a while (slurmctld or the API server
restarting): Job.wait and the notebooks' watch ask again, and say so once. A refusal on the first ask stops them;
a refusal of a job answered for before is asked again for a while (a restarted API server refuses until its
authorizer has read the roles), then stops them."""

from __future__ import annotations

import types

import pytest

from portal import jobs, notebook
from portal.jobs import Asker, Job
from portal.scheduler import asker as asker_module
from portal.scheduler.kubernetes.errors import KubernetesRefused, KubernetesUnavailable, kubernetes_failure
from portal.scheduler.slurm.errors import SlurmUnavailable


class FlakyScheduler:
    """Answers the states given, raising the ones that are exceptions."""

    def __init__(self, *answers):
        self.answers = list(answers)

    def state(self, record, user):
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def metrics(self, record, user):
        return types.SimpleNamespace(epochs_done=1)


def job(*answers) -> Job:
    record = types.SimpleNamespace(id="k8s-20261126-100000-aaaaaa", spec=types.SimpleNamespace(epochs=2))
    return Job(record, FlakyScheduler(*answers), "alice")


def test_wait_asks_again_while_the_scheduler_does_not_answer():
    down = kubernetes_failure("the job", 0, "connection refused")
    assert job("RUNNING", down, SlurmUnavailable("slurmctld"), "COMPLETED").wait(timeout=5, poll=0) == "COMPLETED"


def test_wait_stops_at_a_refusal_and_at_its_timeout(monkeypatch):
    forbidden = kubernetes_failure("the job", 403, "forbidden")
    with pytest.raises(KubernetesRefused):
        job(forbidden, "COMPLETED").wait(timeout=5, poll=0)
    monkeypatch.setattr(asker_module, "REFUSED_AGAIN_S", 0.0)
    with pytest.raises(KubernetesRefused):
        job("RUNNING", forbidden, "COMPLETED").wait(timeout=5, poll=0)
    down = kubernetes_failure("the job", 503, "etcd")
    with pytest.raises(TimeoutError, match="unknown: the scheduler does not answer now.*could not answer the job "
                                           "now: 503 etcd"):
        job(*[down] * 100).wait(timeout=0.05, poll=0.01)


def test_watch_says_once_that_the_scheduler_does_not_answer(capsys, monkeypatch):
    monkeypatch.setattr(notebook, "_in_widget_frontend", lambda: False)
    monkeypatch.setattr(notebook.time, "sleep", lambda s: None)
    down = kubernetes_failure("the job", 0, "connection refused")
    assert notebook.watch(job("RUNNING", down, down, "COMPLETED")) == "COMPLETED"
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == [
        "job k8s-20261126-100000-aaaaaa: RUNNING, epoch 1/2",
        "job k8s-20261126-100000-aaaaaa: the scheduler does not answer now; asking again (the Kubernetes API did "
        "not answer (the job): connection refused)",
        "job k8s-20261126-100000-aaaaaa: COMPLETED, epoch 1/2"]


RBAC_NOT_READY = kubernetes_failure("job k8s-1", 403, 'jobs.batch "k8s-1" is forbidden: ... RBAC: [clusterrole.rbac.'
                                    'authorization.k8s.io "system:basic-user" not found]')


def test_a_refusal_after_answers_is_asked_again_for_a_while(capsys, monkeypatch):
    """As in CI on 2026-11-27: the API server restarted under notebook 02's watch answered 403 for a moment."""
    assert job("RUNNING", RBAC_NOT_READY, RBAC_NOT_READY, "COMPLETED").wait(timeout=5, poll=0) == "COMPLETED"
    monkeypatch.setattr(notebook, "_in_widget_frontend", lambda: False)
    monkeypatch.setattr(notebook.time, "sleep", lambda s: None)
    assert notebook.watch(job("RUNNING", RBAC_NOT_READY, "RUNNING", RBAC_NOT_READY, "COMPLETED")) == "COMPLETED"
    lines = [line.split("] ", 1)[1] for line in capsys.readouterr().out.splitlines()]
    assert lines[1].startswith("job k8s-20261126-100000-aaaaaa: the scheduler refused what it answered before; "
                               "asking again for up to 60 s (the Kubernetes API refused job k8s-1: 403")
    assert lines[-1] == "job k8s-20261126-100000-aaaaaa: COMPLETED, epoch 1/2"


def test_a_refusal_that_lasts_is_raised(monkeypatch):
    clock = iter(range(0, 1000, 10))  # each refusal 10 s after the last (an answer reads no clock)
    monkeypatch.setattr(jobs.time, "monotonic", lambda: float(next(clock)))
    asker, answers = Asker(refused_again_s=30), iter(["RUNNING", *[RBAC_NOT_READY] * 10])

    def ask():
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    assert asker.ask(ask) == ("RUNNING", None)
    for _ in range(3):  # refused 0, 10 and 20 s into the 30-s window: asked again
        assert asker.ask(ask)[1] is not None
    with pytest.raises(KubernetesRefused, match="system:basic-user"):  # refused for 30 s
        asker.ask(ask)


def test_the_api_servers_failures_are_classed_by_status():
    assert isinstance(kubernetes_failure("x", 0, "timed out"), KubernetesUnavailable)
    assert isinstance(kubernetes_failure("x", 429, "slow down"), KubernetesUnavailable)
    assert isinstance(kubernetes_failure("x", 500, "etcd"), KubernetesUnavailable)
    for status in (400, 403, 409, 422):
        assert isinstance(kubernetes_failure("x", status, "no"), KubernetesRefused)
