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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from trainyard.core.exitcodes import ExitKind, classify_exit
from trainyard.core.states import TaskState


@dataclass(frozen=True)
class RolePolicy:
    name: str
    instances: int
    min_failed: int | None = 1  # None: failures never fail the attempt
    min_succeeded: int | None = None  # None: no early success


class AttemptOutcome(StrEnum):
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"


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

    Returns ``None`` while the attempt should keep running.
    """
    for role in roles:
        failed = sum(1 for i in range(role.instances) if states.get((role.name, i)) == TaskState.FAILED)
        min_failed = _norm(role.min_failed)
        if min_failed is not None and failed >= min_failed:
            return Completion(
                AttemptOutcome.FAILED,
                f"{failed} task(s) of role {role.name} failed (minFailedInstances={min_failed})",
            )
    for role in roles:
        succeeded = sum(
            1 for i in range(role.instances) if states.get((role.name, i)) == TaskState.SUCCEEDED
        )
        min_succeeded = _norm(role.min_succeeded)
        if min_succeeded is not None and succeeded >= min_succeeded:
            return Completion(
                AttemptOutcome.SUCCEEDED,
                f"{succeeded} task(s) of role {role.name} succeeded "
                f"(minSucceededInstances={min_succeeded})",
            )
    every = [(r.name, i) for r in roles for i in range(r.instances)]
    if all(key in states and states[key].is_final for key in every):
        return Completion(AttemptOutcome.SUCCEEDED, "all tasks ended")
    return None


def task_should_rerun(exit_code: int | None, runs_so_far: int, task_retry_count: int) -> bool:
    """Whether a failed task is re-run in place (``runs_so_far`` counts the first run)."""
    return classify_exit(exit_code).kind != ExitKind.PERMANENT and runs_so_far <= task_retry_count


def job_should_retry(exit_code: int | None, retries_used: int, job_retry_count: int) -> bool:
    """Whether a failed attempt is followed by a new attempt."""
    if classify_exit(exit_code).kind == ExitKind.PERMANENT:
        return False
    return retries_used < job_retry_count
