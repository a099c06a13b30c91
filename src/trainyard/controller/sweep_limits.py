"""A sweep's ``parallel: N`` (Slurm's ``--array …%N``): while N of its jobs run, the others
wait with reason SWEEP_LIMIT, left out of the scheduler's input (its core knows nothing of
sweeps). The members that may start are the lowest indices among those waiting."""

from __future__ import annotations

from collections import defaultdict

from sqlalchemy.orm import Session

from trainyard.core.states import QUEUED_JOB_STATES
from trainyard.scheduler.snapshot import KeepWaiting, PendingJob, PendingReason
from trainyard.store.queries import sweeps as sweep_queries


def hold_back(session: Session, pending: tuple[PendingJob, ...]) -> tuple[tuple[PendingJob, ...], list[KeepWaiting]]:
    """The waiting jobs the scheduler may consider this cycle, and why each other one waits."""
    members = sweep_queries.capped_members(session)
    if not members:
        return pending, []
    waiting_ids = {p.job_id for p in pending}
    running: dict[int, int] = defaultdict(int)
    waiting: dict[int, list[tuple[int, int]]] = defaultdict(list)
    caps: dict[int, int] = {}
    for sweep_id, parallel, index, job_id, state in members:
        caps[sweep_id] = parallel
        if state in QUEUED_JOB_STATES:
            if job_id in waiting_ids:
                waiting[sweep_id].append((index, job_id))
        else:
            running[sweep_id] += 1  # running, or stopping: it still holds what it ran on
    held: list[KeepWaiting] = []
    for sweep_id, queue in waiting.items():
        room = max(0, caps[sweep_id] - running[sweep_id])
        # Those let through take their places now: the reason stays true once they start.
        taken = running[sweep_id] + min(room, len(queue))
        for position, (_, job_id) in enumerate(sorted(queue)[room:], start=1):
            held.append(KeepWaiting(
                job_id, PendingReason.SWEEP_LIMIT,
                f"{taken} of its sweep {sweep_id}'s jobs run or start, the most it allows at once "
                f"(parallel: {caps[sweep_id]}); it starts when one of them ends", position,
                short=f"sweep {sweep_id}: {taken}/{caps[sweep_id]} running"))
    if not held:
        return pending, []
    out = {w.job_id for w in held}
    return tuple(p for p in pending if p.job_id not in out), held
