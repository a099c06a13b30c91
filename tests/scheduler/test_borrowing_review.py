"""Review of issue 30 (borrowing and fair share): reproductions of what the review found.

Each test marked ``xfail(strict=True)`` shows a bug that is still there (its reason says
what is wrong); the others pin down behaviour the review checked and found to hold.
"""

from __future__ import annotations

import pytest
from scheduler_world import job, node, on, running, snapshot

from trainyard.scheduler.schedule import schedule
from trainyard.scheduler.snapshot import PendingReason, SchedulerConfig, VirtualCluster

H = 7 * 24 * 3600.0  # the default half-life
VISION = VirtualCluster("vision", {"A100": 8})
NLP = VirtualCluster("nlp", {"A100": 8})
NODES = (node("a"), node("b"))


def wait_of(decisions, job_id: int):
    return next(w for w in decisions.waits if w.job_id == job_id)


def _full() -> list:
    # vision uses its quota on a, nlp its own on b: nothing idle to borrow.
    return [running(90, on("a", *range(8)), vc="vision", user="alice"),
            running(91, on("b", *range(8)), vc="nlp", user="bob")]


@pytest.mark.xfail(strict=True, reason=(
    "borrowing.run_borrowing reuses the first job's Wait for every later job of the same shape "
    "(failed[shape]); _borrow_wait keeps that first job's reservation, so every job behind it says "
    "'first in line: its reservation ...', 'reserved' in yard jobs, and gets the head's ETA"))
def test_only_the_head_of_a_queue_says_it_is_first_in_line_after_borrowing_was_tried() -> None:
    pending = [job(1, 1000, vc="vision", user="alice"), job(2, 1000, vc="vision", user="alice"),
               job(3, 1000, vc="vision", user="alice")]
    decisions = schedule(snapshot(NODES, pending, _full(), vcs=(VISION, NLP)))
    assert "first in line" in wait_of(decisions, 1).message
    for later in (2, 3):
        wait = wait_of(decisions, later)
        assert wait.reason == PendingReason.QUOTA
        assert "first in line" not in wait.message, wait.message
        assert "reserved" not in wait.short, wait.short


def test_without_borrowing_only_the_head_says_it_is_first_in_line() -> None:
    # The same queue with borrowing off: the message was right before issue 30.
    pending = [job(1, 1000, vc="vision", user="alice"), job(2, 1000, vc="vision", user="alice")]
    decisions = schedule(snapshot(NODES, pending, _full(), vcs=(VISION, NLP),
                                  config=SchedulerConfig(borrowing=False)))
    assert "first in line" in wait_of(decisions, 1).message
    assert "first in line" not in wait_of(decisions, 2).message


@pytest.mark.xfail(strict=True, reason=(
    "reasons.explain says 'N job(s) of users with less recent use go first' for every job fair share "
    "moved back, but fair_order also charges a half-life per queued job: a user with MORE recent use "
    "and fewer queued jobs overtakes, and the message is then false"))
def test_the_fair_share_message_is_true_when_a_heavier_user_goes_first() -> None:
    # alice: no recent use, two jobs queued first; bob: half a half-life of GPU-seconds, one job.
    # Order: alice's 1 (0), bob's 3 (0.5 H), alice's 2 (0 + H): bob, the heavier user, goes ahead.
    pending = [job(1, 1000, vc="vision", user="alice"), job(2, 1000, vc="vision", user="alice"),
               job(3, 1000, vc="vision", user="bob")]
    decisions = schedule(snapshot(NODES, pending, _full(), vcs=(VISION, NLP),
                                  usage={("vision", "bob"): 0.5 * H}, config=SchedulerConfig(borrowing=False)))
    positions = {w.job_id: w.position for w in decisions.waits}
    assert positions == {1: 1, 3: 2, 2: 3}
    message = wait_of(decisions, 2).message
    assert "fair share" in message
    assert "less recent use" not in message, message
