"""portal.service.parts: each user's part of a view of several users, read in his own share of the part readers,
waited for until the view's deadline and answered from what was read when late (issue 49, item 7).

A part that "stalls" waits on an event the test holds, as a read of a FIFO would wait for a writer; the deadlines
are what a view waits, never a measure of speed: the parts that must answer in time answer at once."""

from __future__ import annotations

import threading

import pytest

from portal.service.parts import Part, UserParts

DEADLINE_S = 2.0  # a view's wait for a stalled part: the tests that meet one wait this long once


def stalled(release: threading.Event, value: object, started: list | None = None):
    def read():
        if started is not None:
            started.append(value)
        assert release.wait(30), "the test never released the part"
        return value
    return read


def settle(parts: UserParts, user: str) -> None:
    """Until none of the user's parts holds a worker (a late one, released, has ended)."""
    pause = threading.Event()
    for _ in range(300):
        if parts.in_use(user) == 0:
            return
        pause.wait(0.05)
    raise AssertionError(f"{user}'s parts still hold {parts.in_use(user)} worker(s)")


def test_a_stalled_users_part_is_late_and_the_others_answer_from_what_they_read():
    now = [100.0]
    parts, release = UserParts(workers=4, share=2, clock=lambda: now[0]), threading.Event()
    try:
        first = parts.gather({"alice": ("rows", lambda: ["alice's job"]),
                              "bob": ("rows", stalled(release, ["bob's job"]))}, DEADLINE_S)
        assert first["alice"] == Part("alice", ["alice's job"]) and first["alice"].note() == ""
        assert (first["bob"].value, first["bob"].late) == (None, f"not read within {DEADLINE_S:g} s")
        assert first["bob"].note("jobs") == (f"bob's jobs are unreadable now (not read within {DEADLINE_S:g} s); "
                                             "shown once they answer")
        release.set()  # his read ends after the view answered: what it read is the next view's
        settle(parts, "bob")
        assert parts.gather({"bob": ("rows", lambda: ["bob's job, read again"])}, DEADLINE_S)["bob"].fresh
        now[0] = 130.0
        release = threading.Event()
        late = parts.gather({"bob": ("rows", stalled(release, ["bob's newer job"]))}, DEADLINE_S)["bob"]
        assert (late.value, late.age_s) == (["bob's job, read again"], 30.0)
        assert late.note("jobs") == f"stale: bob's jobs as read 30 s ago (not read within {DEADLINE_S:g} s)"
    finally:
        release.set()
        parts.stop()


def test_one_users_parts_hold_at_most_his_share_and_another_user_is_read_at_once():
    parts, release, started = UserParts(workers=4, share=2), threading.Event(), []
    try:
        bobs = [parts.ask("bob", ("job", n), stalled(release, n, started)) for n in range(10)]
        pause = threading.Event()
        for _ in range(200):
            if len(started) == 2:
                break
            pause.wait(0.05)
        assert len(started) == 2 and parts.in_use("bob") == 2  # 8 of his wait without a worker
        alice = parts.gather({"alice": ("rows", lambda: "her rows")}, 30)["alice"]
        assert alice == Part("alice", "her rows")  # 2 of the 4 workers were free for her
        release.set()
        assert sorted(future.result(30) for future in bobs) == list(range(10))  # his own, in turn
        settle(parts, "bob")
        assert not parts._waiting and not parts._holding and not parts._running  # forgotten when idle
    finally:
        release.set()
        parts.stop()


def test_the_same_part_asked_while_it_is_read_is_that_one_read():
    parts, release = UserParts(workers=2, share=1), threading.Event()
    try:
        futures = [parts.ask("bob", "rows", stalled(release, "rows")) for _ in range(5)]
        assert len({id(future) for future in futures}) == 1
        release.set()
        assert futures[0].result(30) == "rows" and parts.reads == 1
        settle(parts, "bob")
        assert parts.gather({"bob": ("rows", lambda: "read again")}, 30)["bob"].value == "read again"
        assert parts.reads == 2  # ended: asked again, read again
    finally:
        release.set()
        parts.stop()


def test_a_failed_part_is_answered_from_its_last_value_with_the_error():
    now = [0.0]
    parts = UserParts(workers=2, share=1, clock=lambda: now[0])

    def broken():
        raise OSError("a fifo, not a regular file")
    try:
        assert parts.gather({"bob": ("rows", broken)}, 30)["bob"] == Part("bob", None, "a fifo, not a regular file")
        parts.gather({"bob": ("rows", lambda: ["job 7"])}, 30)
        now[0] = 12.0
        failed = parts.gather({"bob": ("rows", broken)}, 30)["bob"]
        assert (failed.value, failed.age_s, failed.late) == (["job 7"], 12.0, "a fifo, not a regular file")
        lookup = parts.gather({"bob": ("rows", broken)}, 30, keep=False)["bob"]
        assert lookup.value is None  # a part not kept (a lookup) is never answered from an earlier read
    finally:
        parts.stop()


def test_after_a_stop_no_part_is_read_and_a_view_still_answers():
    parts = UserParts(workers=2, share=1)
    parts.stop()
    answered = parts.gather({"bob": ("rows", lambda: "never")}, 30)["bob"]
    assert answered.value is None and "shutdown" in answered.late and parts.reads == 0


@pytest.mark.parametrize("workers, share", [(4, 0), (1, 2)])
def test_a_share_is_one_or_more_and_no_more_than_the_workers(workers, share):
    with pytest.raises(ValueError, match="allowed: a share of 1 or more"):
        UserParts(workers=workers, share=share)
