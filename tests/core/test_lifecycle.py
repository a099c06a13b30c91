from __future__ import annotations

from pathlib import Path

import pytest

from trainyard.core.exitcodes import ExitKind, classify_exit, is_out_of_memory, out_of_memory_message
from trainyard.core.lifecycle import (
    MAX_PLATFORM_RETRIES,
    AttemptOutcome,
    RolePolicy,
    evaluate_completion,
    job_should_retry,
    platform_retries_used,
    platform_retry_due,
    task_should_rerun,
)
from trainyard.core.states import (
    AttemptState,
    IllegalTransition,
    JobState,
    TaskState,
    check_attempt_transition,
    check_job_transition,
    check_task_transition,
)

S, F, R, X, L = TaskState.SUCCEEDED, TaskState.FAILED, TaskState.RUNNING, TaskState.STOPPED, TaskState.LOST


def states(role: str, *values: TaskState) -> dict[tuple[str, int], TaskState]:
    return {(role, i): v for i, v in enumerate(values)}


def test_one_failed_task_fails_the_attempt_by_default() -> None:
    result = evaluate_completion([RolePolicy("w", 3)], states("w", S, F, R))
    assert result is not None and result.outcome == AttemptOutcome.FAILED


def test_the_attempt_keeps_running_while_tasks_run_and_none_failed() -> None:
    assert evaluate_completion([RolePolicy("w", 2)], states("w", S, R)) is None


def test_all_tasks_succeeding_succeeds_the_attempt() -> None:
    result = evaluate_completion([RolePolicy("w", 2)], states("w", S, S))
    assert result is not None and result.outcome == AttemptOutcome.SUCCEEDED


def test_an_elastic_roles_grown_workers_keep_the_attempt_running_until_they_end() -> None:
    """An elastic role's ``instances`` is its minimum: a new user's trial saw a job end SUCCEEDED
    as its minimum's worker finished, and the grown worker still at work stopped (SIGTERM)."""
    elastic = [RolePolicy("w", 1)]
    assert evaluate_completion(elastic, states("w", S, R)) is None
    assert evaluate_completion(elastic, states("w", S, S, X)).outcome == AttemptOutcome.SUCCEEDED  # w/2 shrunk away


def test_min_failed_minus_one_never_fails_and_the_attempt_succeeds_when_all_end() -> None:
    roles = [RolePolicy("w", 2, min_failed=-1)]
    assert evaluate_completion(roles, states("w", F, R)) is None
    assert evaluate_completion(roles, states("w", F, F)).outcome == AttemptOutcome.SUCCEEDED


def test_min_succeeded_ends_the_attempt_early_as_a_success() -> None:
    roles = [RolePolicy("ps", 1, min_failed=1), RolePolicy("worker", 3, min_succeeded=2)]
    current = {("ps", 0): R, **states("worker", S, S, R)}
    assert evaluate_completion(roles, current).outcome == AttemptOutcome.SUCCEEDED


def test_failure_is_checked_before_success() -> None:
    roles = [RolePolicy("w", 2, min_failed=1, min_succeeded=1)]
    assert evaluate_completion(roles, states("w", S, F)).outcome == AttemptOutcome.FAILED


def test_tasks_are_rerun_in_place_up_to_task_retry_count_but_never_for_permanent_errors() -> None:
    assert task_should_rerun(1, runs_so_far=1, task_retry_count=1)
    assert not task_should_rerun(1, runs_so_far=2, task_retry_count=1)
    assert not task_should_rerun(127, runs_so_far=1, task_retry_count=5)


def test_jobs_retry_up_to_job_retry_count_but_not_for_command_not_found() -> None:
    assert job_should_retry(1, retries_used=0, job_retry_count=1)
    assert not job_should_retry(1, retries_used=1, job_retry_count=1)
    assert not job_should_retry(127, retries_used=0, job_retry_count=3)
    assert job_should_retry(None, retries_used=0, job_retry_count=1)


@pytest.mark.parametrize(
    ("code", "kind", "words"),
    [
        (0, ExitKind.SUCCEEDED, "exited with 0"),
        (3, ExitKind.USER_ERROR, "exited with 3"),
        (127, ExitKind.PERMANENT, "command not found"),
        (137, ExitKind.KILLED, "SIGKILL"),
        (143, ExitKind.KILLED, "SIGTERM"),
        (None, ExitKind.LOST, "no exit status"),
    ],
)
def test_exit_codes_are_classified_for_people(code, kind, words) -> None:
    info = classify_exit(code)
    assert info.kind == kind and words in info.description


def test_out_of_memory_names_the_limit_and_is_retried_like_any_failure_of_the_job() -> None:
    message = out_of_memory_message(100, 137)
    assert message == "OUT_OF_MEMORY: used more than its 100 MiB memory limit (memoryMB: 100) and was killed (exit 137)"
    assert is_out_of_memory(message) and not is_out_of_memory("killed by SIGKILL") and not is_out_of_memory(None)
    # The job's own failure: its retry counts apply (no platform retry), as for any kill.
    assert task_should_rerun(137, runs_so_far=1, task_retry_count=1)
    assert job_should_retry(137, retries_used=0, job_retry_count=1)
    assert not job_should_retry(137, retries_used=1, job_retry_count=1)


def test_the_state_machine_refuses_illegal_moves() -> None:
    assert check_job_transition(JobState.WAITING, JobState.RUNNING) == JobState.RUNNING
    with pytest.raises(IllegalTransition):
        check_job_transition(JobState.SUCCEEDED, JobState.RUNNING)
    with pytest.raises(IllegalTransition):
        check_job_transition(JobState.STOPPING, JobState.SUCCEEDED)
    with pytest.raises(IllegalTransition):
        check_task_transition(TaskState.FAILED, TaskState.RUNNING)
    assert all(not nxt for state, nxt in
               __import__("trainyard.core.states", fromlist=["JOB_TRANSITIONS"]).JOB_TRANSITIONS.items()
               if state.is_final)


def test_an_attempt_failed_only_by_lost_tasks_is_lost_not_failed() -> None:
    result = evaluate_completion([RolePolicy("w", 3)], states("w", S, L, R))
    assert result is not None and result.outcome == AttemptOutcome.LOST
    assert "1 task(s) of role w lost" in result.reason


def test_a_task_that_really_failed_makes_the_attempt_failed_even_beside_a_lost_one() -> None:
    roles = [RolePolicy("ps", 1), RolePolicy("w", 2)]
    result = evaluate_completion(roles, {("ps", 0): L, **states("w", F, R)})
    assert result is not None and result.outcome == AttemptOutcome.FAILED


def test_lost_tasks_count_towards_min_failed_only_where_real_failures_alone_would_not_fire() -> None:
    roles = [RolePolicy("w", 3, min_failed=2)]
    assert evaluate_completion(roles, states("w", F, R, R)) is None
    assert evaluate_completion(roles, states("w", F, L, R)).outcome == AttemptOutcome.LOST
    assert evaluate_completion(roles, states("w", F, F, L)).outcome == AttemptOutcome.FAILED
    tolerant = [RolePolicy("w", 2, min_failed=-1)]
    assert evaluate_completion(tolerant, states("w", L, S)).outcome == AttemptOutcome.SUCCEEDED


def test_platform_retries_are_counted_from_lost_attempts_and_bounded() -> None:
    assert MAX_PLATFORM_RETRIES >= 1
    lost_so_far = [AttemptState.LOST] * (MAX_PLATFORM_RETRIES - 1) + [AttemptState.PREEMPTED, AttemptState.FAILED]
    assert platform_retries_used(lost_so_far) == MAX_PLATFORM_RETRIES - 1
    assert platform_retry_due(lost_so_far)
    assert not platform_retry_due([*lost_so_far, AttemptState.LOST])


def test_lost_is_final_for_tasks_and_attempts() -> None:
    assert L.is_final and check_task_transition(R, L) == L
    assert check_attempt_transition(AttemptState.RUNNING, AttemptState.LOST) == AttemptState.LOST
    with pytest.raises(IllegalTransition):
        check_task_transition(L, R)
    with pytest.raises(IllegalTransition):
        check_attempt_transition(AttemptState.LOST, AttemptState.FAILED)


def test_the_docs_state_the_platform_retry_bound_the_code_applies() -> None:
    page = (Path(__file__).parents[2] / "docs" / "user" / "jobs.md").read_text()
    assert f"at most {MAX_PLATFORM_RETRIES} such platform retries" in page
