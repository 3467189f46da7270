"""portal.service.fairness: each user's share of the dashboard's workers, one read for the same read asked at once,
and the API's rate per user."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from portal.service.fairness import RateLimits, UserShares, read_key


def run(coroutine):
    return asyncio.run(coroutine)


def test_one_user_holds_at_most_their_share_and_another_is_served_at_once():
    async def scenario():
        shares, release = UserShares(2), asyncio.Event()
        started = []

        async def bobs_slow_read(n: int) -> int:
            started.append(n)
            await release.wait()  # a FIFO that never answers, as far as this user knows
            return n

        bobs = [asyncio.create_task(shares.run("bob", lambda n=n: bobs_slow_read(n))) for n in range(10)]
        await asyncio.sleep(0.05)
        assert len(started) == 2 and shares.in_use("bob") == 2  # 8 of his wait without a worker

        async def alices_list() -> str:
            return "her jobs"
        assert await asyncio.wait_for(shares.run("alice", alices_list), 1) == "her jobs"
        release.set()
        assert sorted(await asyncio.gather(*bobs)) == list(range(10))
        assert shares.in_use("bob") == 0 and not shares._slots and not shares._users  # forgotten when idle
    run(scenario())


def test_the_same_read_asked_while_it_runs_is_answered_by_that_one_read():
    async def scenario():
        shares, calls = UserShares(2), []

        async def read() -> dict:
            calls.append(1)
            await asyncio.sleep(0.05)
            return {"state": "RUNNING"}
        results = await asyncio.gather(*(shares.run("bob", read, key=("job", "7")) for _ in range(10)))
        assert len(calls) == 1 and all(r == {"state": "RUNNING"} for r in results)
        await asyncio.gather(shares.run("alice", read, key=("job", "7")), shares.run("bob", read, key=("job", "8")))
        assert len(calls) == 3  # another user's read, another job: read on their own

        async def failing() -> None:
            calls.append(1)
            await asyncio.sleep(0.05)
            raise OSError("not a regular file")
        answers = await asyncio.gather(*(shares.run("bob", failing, key="x") for _ in range(3)), return_exceptions=True)
        assert len(calls) == 4 and all(isinstance(a, OSError) for a in answers)
        assert await shares.run("bob", read, key="x") == {"state": "RUNNING"}  # ended: the next one reads again
    run(scenario())


@dataclass
class Named:
    name: str


@dataclass
class Job:
    id: str


def board_get(user, job_id, everyone):  # stands for JobBoard.get
    return None


def test_a_reads_key_names_its_arguments_by_what_they_name():
    one = read_key(board_get, (Named("bob"), "7", [Named("a"), Named("b")]), {"viewer": "bob"})
    assert one == read_key(board_get, (Named("bob"), "7", [Named("a"), Named("b")]), {"viewer": "bob"})
    assert one != read_key(board_get, (Named("alice"), "7", [Named("a"), Named("b")]), {"viewer": "bob"})
    assert read_key(board_get, (Job("7"),), {}) != read_key(board_get, (Job("8"),), {})
    assert read_key(board_get, (object(),), {}) is None  # not named: never joined
    assert read_key(board_get, ({"a": 1},), {}) is None


def test_the_rate_per_user_allows_a_burst_then_says_when_to_come_back():
    now = [100.0]
    limits = RateLimits(rate=2, burst=3, clock=lambda: now[0])
    assert [limits.take("bob") for _ in range(3)] == [0, 0, 0]
    wait = limits.take("bob")
    assert wait == pytest.approx(0.5)
    assert limits.take("alice") == 0  # his bucket is his
    now[0] += 0.5
    assert limits.take("bob") == 0 and limits.take("bob") > 0
    now[0] += 60
    assert [limits.take("bob") for _ in range(4)][:3] == [0, 0, 0]  # full again, never more than the burst
    with pytest.raises(ValueError, match="rate"):
        RateLimits(rate=0, burst=1)
