"""One wait for a 429's text and its Retry-After header (portal.retry)."""

from __future__ import annotations

import math

import pytest

from portal.retry import RetryLater


@pytest.mark.parametrize("wait_s,seconds", [(0.0, 1), (0.001, 1), (0.5, 1), (1.0, 1), (1.0001, 2), (9.5, 10),
                                            (59.999, 60), (3600.0, 3600)])
def test_the_wait_is_rounded_up_to_whole_seconds_and_is_at_least_one(wait_s, seconds):
    later = RetryLater.after(wait_s)
    assert later.seconds == seconds
    # Text and header say the same number: a client that waits what either says is let in.
    assert later.text == f"try again in {seconds} s" and later.headers == {"Retry-After": str(seconds)}
    assert seconds >= wait_s


@pytest.mark.parametrize("wait_s", [math.nan, math.inf, -math.inf])
def test_a_wait_that_is_no_number_of_seconds_is_refused(wait_s):
    with pytest.raises(ValueError, match="wait_s is .*; allowed: a finite number of seconds"):
        RetryLater.after(wait_s)


def test_the_hubs_429_carries_the_header_its_write_error_sends():
    later = RetryLater.after(2.2)
    err = later.http_error(f"Too many failed logins for alice: {later.text}.")
    assert err.status_code == 429 and err.headers == {"Retry-After": "3"}
    assert "try again in 3 s" in err.log_message
