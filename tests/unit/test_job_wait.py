"""Waiting for a job rides through a scheduler that does not answer for a while (slurmctld or the API server
restarting): Job.wait and the notebooks' watch ask again, and say so once; a refusal still stops them."""

from __future__ import annotations

import types

import pytest

from portal import notebook
from portal.jobs import Job
from portal.scheduler.errors import KubernetesRefused, KubernetesUnavailable, SlurmUnavailable, kubernetes_failure


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


def test_wait_stops_at_a_refusal_and_at_its_timeout():
    with pytest.raises(KubernetesRefused):
        job("RUNNING", kubernetes_failure("the job", 403, "forbidden")).wait(timeout=5, poll=0)
    down = kubernetes_failure("the job", 503, "etcd")
    with pytest.raises(TimeoutError, match="unknown .*could not answer the job now: 503 etcd"):
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


def test_the_api_servers_failures_are_classed_by_status():
    assert isinstance(kubernetes_failure("x", 0, "timed out"), KubernetesUnavailable)
    assert isinstance(kubernetes_failure("x", 429, "slow down"), KubernetesUnavailable)
    assert isinstance(kubernetes_failure("x", 500, "etcd"), KubernetesUnavailable)
    for status in (400, 403, 409, 422):
        assert isinstance(kubernetes_failure("x", status, "no"), KubernetesRefused)
