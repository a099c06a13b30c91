"""Jobs that wait for other jobs (the job file's ``dependencies``), kept from the scheduler.

Each cycle, before the snapshot is built: a waiting job with a dependency not yet met is
left out of the scheduler's pending jobs (the pure scheduler never learns of dependencies)
and gets ``DEPENDENCY`` as its pending reason, naming the jobs it still waits for. A job
one of whose dependencies can never be met (``afterok`` on a job that FAILED or was STOPPED,
``afternotok`` on one that SUCCEEDED) is ended at once, as FAILED with the reason (Slurm's
``DependencyNeverSatisfied`` with ``kill_invalid_depend``); the jobs waiting on it see that
in the same cycle, so a whole chain ends together. A job waited for that is suspended or
requeued has not ended: its dependants keep waiting.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy.orm import Session

from trainyard.core import dependencies as rules
from trainyard.core.states import JobState
from trainyard.scheduler.snapshot import KeepWaiting, PendingJob, PendingReason
from trainyard.spec.dependencies import Dependencies
from trainyard.store.queries import dependencies as queries


@dataclass(frozen=True)
class Gate:
    ready: tuple[PendingJob, ...]  # for the scheduler: every dependency met (or none)
    waits: tuple[KeepWaiting, ...]  # held back, each with its DEPENDENCY reason
    never: dict[int, str]  # job id -> why it can never start (it is failed with this)


def hold_back(session: Session, pending: tuple[PendingJob, ...], dependencies: Mapping[int, Dependencies]) -> Gate:
    """Split ``pending`` by its jobs' ``dependencies`` (job id -> the job file's, for those with any)."""
    waiting = [job.job_id for job in pending if job.job_id in dependencies]
    if not waiting:
        return Gate(pending, (), {})
    listed = {job_id: list(dependencies[job_id].listed()) for job_id in waiting}
    states = {job_id: state for job_id, (state, _) in
              queries.job_states(session, [d for deps in listed.values() for _, d, _ in deps]).items()}
    never: dict[int, str] = {}
    changed = True
    while changed:  # a job ended here ends the jobs that waited for it to succeed, in turn
        changed = False
        for job_id in waiting:
            if job_id in never:
                continue
            why = _never(listed[job_id], states)
            if why is not None:
                never[job_id] = why
                states[job_id] = JobState.FAILED
                changed = True
    waits, held = [], set()
    for job_id in waiting:
        if job_id in never:
            continue
        unmet = [(condition, other) for condition, other, _ in listed[job_id]
                 if rules.status(condition, states[other]) == rules.Status.WAITING]
        if unmet:
            held.add(job_id)
            waits.append(_wait(job_id, unmet))
    ready = tuple(job for job in pending if job.job_id not in held and job.job_id not in never)
    return Gate(ready, tuple(waits), never)


def _never(listed: list[tuple[str, int, str]], states: dict[int, str]) -> str | None:
    for condition, other, _ in listed:
        state = states.get(other)
        if state is None:  # removed since it was submitted (jobs are not deleted today)
            return f"its dependency can never be met: job {other} no longer exists"
        if rules.status(condition, state) == rules.Status.NEVER:
            return f"its dependency can never be met: {rules.never_words(condition, other, state)}"
    return None


def _wait(job_id: int, unmet: list[tuple[str, int]]) -> KeepWaiting:
    words = [rules.waiting_words(condition, other) for condition, other in unmet]
    message = "waits for " + (words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1])
    short = "after " + ",".join(str(other) for _, other in unmet[:5]) + ("…" if len(unmet) > 5 else "")
    return KeepWaiting(job_id, PendingReason.DEPENDENCY, message, 0, short=short)
