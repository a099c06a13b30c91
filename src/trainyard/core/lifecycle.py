"""The rules that decide a job's next state: completion, task retries and job retries.

These follow OpenPAI (FrameworkController) semantics:

* a role fails the attempt once ``minFailedInstances`` of its tasks have failed
  (default 1; ``-1``/``None`` = never);
* a role succeeds the attempt once ``minSucceededInstances`` of its tasks have succeeded
  (default ``-1``/``None`` = no early success);
* otherwise the attempt succeeds when every task has ended without a failure trigger;
* a failed task is re-run in place up to ``taskRetryCount`` times before it counts as failed;
* a failed attempt is retried as a new attempt up to ``jobRetryCount`` times, unless its
  failure is permanent (e.g. ``command not found``), which no retry can fix.

A task whose exit status is unknown is ``LOST`` (its supervision died with no record of how
it ended, its node failed): that is the platform's fault, not the job's. As OpenPAI treats
platform errors, an attempt that fails only because of lost tasks (the failure trigger
would not fire on the tasks that really failed) ends ``LOST`` and is retried as a new
attempt that spends none of ``jobRetryCount``, like a preemption. A lost task is not re-run
in place (its run may have done its work; the whole attempt restarts, as after any
failure). So that a fault that keeps recurring cannot loop forever, a job gets at most
``MAX_PLATFORM_RETRIES`` such retries; past them a lost attempt counts as failed, and
``jobRetryCount`` decides as for any failure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from trainyard.core.exitcodes import ExitKind, classify_exit
from trainyard.core.states import AttemptState, TaskState

# Retries for platform faults (lost attempts) a job gets on top of its jobRetryCount.
MAX_PLATFORM_RETRIES = 3
# A retry waits (Kubernetes' crash-loop and image-pull back-off): the first the admin's
# ``job_retry_backoff_seconds``, each next one twice the last, at most this long.
MAX_RETRY_BACKOFF_SECONDS = 300.0


def retry_backoff(first: float, failures: int) -> float:
    """How long a job waits before its next attempt, after ``failures`` failed or lost ones."""
    if first <= 0 or failures <= 0:
        return 0.0
    return min(first * 2.0 ** min(failures - 1, 30), MAX_RETRY_BACKOFF_SECONDS)


@dataclass(frozen=True)
class RolePolicy:
    name: str
    instances: int
    min_failed: int | None = 1  # None: failures never fail the attempt
    min_succeeded: int | None = None  # None: no early success


class AttemptOutcome(StrEnum):
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    LOST = "LOST"  # failed only because tasks were lost: a platform fault


@dataclass(frozen=True)
class Completion:
    outcome: AttemptOutcome
    reason: str


def _norm(value: int | None) -> int | None:
    return None if value is None or value < 0 else value


def evaluate_completion(
    roles: Sequence[RolePolicy], states: Mapping[tuple[str, int], TaskState]
) -> Completion | None:
    """Decide whether an attempt is complete, given its tasks' current states.

    Returns ``None`` while the attempt should keep running. A lost task counts towards
    ``minFailedInstances``, but the tasks that really failed are looked at first: only an
    attempt they alone would not fail is ``LOST``.
    """

    def count(role: RolePolicy, state: TaskState) -> int:
        return sum(1 for i in range(role.instances) if states.get((role.name, i)) == state)

    for role in roles:
        failed = count(role, TaskState.FAILED)
        min_failed = _norm(role.min_failed)
        if min_failed is not None and failed >= min_failed:
            return Completion(
                AttemptOutcome.FAILED,
                f"{failed} task(s) of role {role.name} failed (minFailedInstances={min_failed})",
            )
    for role in roles:
        lost, failed = count(role, TaskState.LOST), count(role, TaskState.FAILED)
        min_failed = _norm(role.min_failed)
        if lost and min_failed is not None and failed + lost >= min_failed:
            return Completion(
                AttemptOutcome.LOST,
                f"{lost} task(s) of role {role.name} lost, their exit status unknown"
                + (f", {failed} failed" if failed else "") + f" (minFailedInstances={min_failed})",
            )
    for role in roles:
        succeeded = count(role, TaskState.SUCCEEDED)
        min_succeeded = _norm(role.min_succeeded)
        if min_succeeded is not None and succeeded >= min_succeeded:
            return Completion(
                AttemptOutcome.SUCCEEDED,
                f"{succeeded} task(s) of role {role.name} succeeded "
                f"(minSucceededInstances={min_succeeded})",
            )
    # Every task, an elastic role's grown workers too (its ``instances`` is its minimum): one
    # still at work keeps the attempt running. (A grown worker that fails is not counted
    # above: its job shrinks instead, ``controller/elastic.py``.)
    names = {r.name for r in roles}
    every = {(r.name, i) for r in roles for i in range(r.instances)} | {key for key in states if key[0] in names}
    if all(key in states and states[key].is_final for key in every):
        return Completion(AttemptOutcome.SUCCEEDED, "all tasks ended")
    return None


def task_should_rerun(exit_code: int | None, runs_so_far: int, task_retry_count: int) -> bool:
    """Whether a failed task is re-run in place (``runs_so_far`` counts the first run)."""
    return classify_exit(exit_code).kind != ExitKind.PERMANENT and runs_so_far <= task_retry_count


def platform_retries_used(attempt_states: Iterable[str]) -> int:
    """Platform retries a job with attempts in these states had: one per lost attempt
    (derived from the attempts, never kept as a counter)."""
    return sum(1 for state in attempt_states if state == AttemptState.LOST)


def platform_retry_due(attempt_states: Iterable[str]) -> bool:
    """Whether a job whose attempts are in these states may have one more platform retry
    (else its lost attempt counts as failed)."""
    return platform_retries_used(attempt_states) < MAX_PLATFORM_RETRIES


def job_should_retry(exit_code: int | None, retries_used: int, job_retry_count: int) -> bool:
    """Whether a failed attempt is followed by a new attempt."""
    if classify_exit(exit_code).kind == ExitKind.PERMANENT:
        return False
    return retries_used < job_retry_count


def run_seconds(spans: Iterable[tuple[datetime | None, datetime | None]], now: datetime) -> float | None:
    """How long a job ran: the (start, end) spans of its attempts summed, an attempt still
    running counting up to ``now``; None for a job that never started. Time spent waiting
    (before the first attempt, between a preemption and the next start) is not run time."""
    total, started = 0.0, False
    for start, end in spans:
        if start is None:
            continue
        started = True
        total += max(0.0, ((end or now) - start).total_seconds())
    return total if started else None
