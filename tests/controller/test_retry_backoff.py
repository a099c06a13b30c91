"""A failed attempt's retry waits a back-off (``controller/retries.py``): 10 s, then twice as
long, with RETRY as the job's reason meanwhile; the clock is the test's."""

from __future__ import annotations

from datetime import timedelta

import pytest

from trainyard.core.clock import FakeClock
from trainyard.core.lifecycle import MAX_RETRY_BACKOFF_SECONDS, retry_backoff


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_failed_attempts_retry_waits_a_back_off_that_doubles(make_world) -> None:
    clock = FakeClock()
    world = make_world(gpus=1, clock=clock, retry_backoff_seconds=10.0)
    job = world.submit("name: flaky\njobRetryCount: 2\ntaskRoles:\n  main:\n    commands: ['exit 3']\n")
    for attempt, wait in ((1, 10), (2, 20)):
        waiting = world.drive(job, None, until=lambda j, n=attempt: j.attempt == n and j.pending_reason == "RETRY",
                              what=f"attempt {attempt} to wait RETRY")
        ended = max(a.finished_at for a in waiting.attempts if a.number == attempt - 1)
        assert waiting.pending_message.startswith("its last attempt failed: it is retried from "
                                                  f"{(ended + timedelta(seconds=wait)):%H:%M:%S} UTC")
        for _ in range(3):  # not placed while the clock stands
            world.cycle()
        assert world.job(job).state == "WAITING" and not any(a.number == attempt for a in world.job(job).attempts)
        clock.advance(wait)
    assert world.drive(job).state == "FAILED" and world.job(job).attempt == 2


def test_the_back_off_doubles_up_to_five_minutes_and_zero_is_none() -> None:
    assert [retry_backoff(10, n) for n in (1, 2, 3, 6, 100)] == [10, 20, 40, MAX_RETRY_BACKOFF_SECONDS,
                                                                 MAX_RETRY_BACKOFF_SECONDS]
    assert retry_backoff(0, 3) == 0 and retry_backoff(10, 0) == 0
