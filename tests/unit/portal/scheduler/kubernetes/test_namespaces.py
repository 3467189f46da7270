"""A user's GPU quota is in force before anything of theirs starts: a ResourceQuota the quota controller has not
counted yet (no status.hard, or the hard limits of before a change) lets the API server admit every pod uncounted,
and may leave the first one out of `used` until the controller's next full count. The portal waits, bounded, for
the count (namespaces.wait_until_counted: a job's submit and a server's start alike)."""

from __future__ import annotations

import pytest

from portal.errors import SchedulerUnavailable
from portal.scheduler.kubernetes.manifests import quota_in_force
from portal.scheduler.kubernetes.namespaces import QUOTA_COUNTED_S, wait_until_counted

HARD = {"requests.nvidia.com/gpu": "4"}
MADE = {"spec": {"hard": HARD}}  # just created: the controller has written no status yet
STALE = {"spec": {"hard": HARD}, "status": {"hard": {"requests.nvidia.com/gpu": "2"}, "used": {}}}  # changed 2 -> 4
COUNTED = {"spec": {"hard": HARD}, "status": {"hard": dict(HARD), "used": {"requests.nvidia.com/gpu": "0"}}}


@pytest.mark.parametrize(("quota", "in_force"), [(MADE, False), (STALE, False), (COUNTED, True),
                                                 ({"spec": {}, "status": {"hard": {}}}, False),
                                                 ({"spec": {"hard": HARD}, "status": None}, False)])
def test_a_quota_is_in_force_once_its_status_has_the_specs_limits(quota, in_force):
    assert quota_in_force(quota) is in_force


class Clock:
    def __init__(self):
        self.now, self.slept = 0.0, 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds


def test_a_counted_quota_costs_one_read_and_no_wait():
    clock, reads = Clock(), []
    wait_until_counted(lambda: reads.append(1) or COUNTED, "dsportal-u-alice", clock=clock, sleep=clock.sleep)
    assert len(reads) == 1 and clock.slept == 0


def test_the_wait_ends_when_the_controller_has_counted_it():
    clock = Clock()
    answers = iter([MADE, MADE, STALE, COUNTED])
    wait_until_counted(lambda: next(answers), "dsportal-u-alice", clock=clock, sleep=clock.sleep)
    assert 0 < clock.slept < 1


def test_a_quota_never_counted_is_unavailable_naming_the_namespace_and_the_controller():
    clock = Clock()
    with pytest.raises(SchedulerUnavailable) as raised:
        wait_until_counted(lambda: MADE, "dsportal-u-alice", clock=clock, sleep=clock.sleep)
    assert QUOTA_COUNTED_S <= clock.now < QUOTA_COUNTED_S + 1
    assert "namespace dsportal-u-alice" in str(raised.value) and "kube-controller-manager" in str(raised.value)
