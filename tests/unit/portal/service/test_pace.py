"""portal.service.pace: open pages refresh at the base period while few are open, and slower as more are, so that
together they ask at most the configured reads a second; the period comes back down when they close."""

from __future__ import annotations

import pytest

from portal.service.pace import Pace


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def open_pages(pace: Pace, clock: Clock, users: int, seconds: float, step: float = 0.5) -> None:
    """`users` pages each asking once per the pace's current period, for `seconds`."""
    asked: dict[int, float] = {}
    end = clock.now + seconds
    while clock.now < end:
        for user in range(users):
            if clock.now - asked.get(user, -1e9) >= pace.poll_s():
                pace.seen(f"user{user}")
                asked[user] = clock.now
        clock.now += step


def test_few_pages_keep_the_base_period():
    clock = Clock()
    pace = Pace(5, 200, clock)
    open_pages(pace, clock, 900, 30)
    assert pace.poll_s() == 5 and pace.open_pages() == 900


def test_many_pages_are_slowed_to_the_reads_a_second_and_come_back_when_they_close():
    clock = Clock()
    pace = Pace(5, 200, clock)
    open_pages(pace, clock, 5000, 120)
    assert pace.poll_s() == 25 and pace.open_pages() == 5000  # 5,000 / 25 s = 200 reads a second
    open_pages(pace, clock, 100, 120)  # 4,900 of them closed
    assert pace.poll_s() == 5 and pace.open_pages() == 100


def test_the_period_is_whole_seconds_and_nonsense_is_refused():
    clock = Clock()
    pace = Pace(5, 300, clock)
    open_pages(pace, clock, 2000, 60)
    assert pace.poll_s() == 7  # ceil(2000 / 300)
    with pytest.raises(ValueError, match="must be above 0"):
        Pace(5, 0)
