"""Jobs whose last attempt failed or was lost wait a back-off before their next attempt.

A retry that comes at once fails the same way while its cause lasts (a registry or a
dataset's source unreachable, a node's disk full): Kubernetes' crash-loop and image-pull
back-offs wait 10 s, then twice as long each time, up to five minutes. Here the wait runs from
the failed attempt's end, for ``job_retry_backoff_seconds`` and doubling with each failed or
lost attempt of the job (``lifecycle.retry_backoff``); meanwhile the job is left out of the
scheduler's pending jobs, as a job waiting on a dependency is, with ``RETRY`` as its reason.
A preempted job's new attempt does not wait: nothing failed.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from trainyard.scheduler.snapshot import KeepWaiting, PendingJob, PendingReason


def hold_back(pending: tuple[PendingJob, ...], retry_at: Mapping[int, float],
              now: float) -> tuple[tuple[PendingJob, ...], tuple[KeepWaiting, ...]]:
    """``pending`` less the jobs whose retry is not due yet, and their waits."""
    due = {job_id: at for job_id, at in retry_at.items() if at > now}
    if not due:
        return pending, ()
    waits = []
    for job in pending:
        if (at := due.get(job.job_id)) is not None:
            when = datetime.fromtimestamp(at, UTC).strftime("%H:%M:%S UTC")
            waits.append(KeepWaiting(job.job_id, PendingReason.RETRY,
                                     f"its last attempt failed: it is retried from {when} (a back-off that doubles "
                                     "with each failed attempt, while what failed it may pass)", 0,
                                     short=f"retry at {when}"))
    return tuple(job for job in pending if job.job_id not in due), tuple(waits)
