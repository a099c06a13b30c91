"""Which of a job's events its owner is told of (``notify.on`` in the job file, or their
account's default): ``succeeded``, ``failed``, ``stopped`` (its final state), ``ended``
(any of those three) and ``preempted`` (the scheduler took its GPUs: the attempt was
requeued, or suspended to resume later). A user's own ``yard suspend`` is not a preemption.
"""

from __future__ import annotations

from trainyard.core.transitions import EventKind

ENDED = "ended"
PREEMPTED = "preempted"
# Every name ``notify.on`` accepts (``spec.models.NOTIFY_ON`` repeats them: spec imports nothing of ours).
NOTICE_CLASSES = ("succeeded", "failed", "stopped", ENDED, PREEMPTED)

_FINAL = {EventKind.SUCCEEDED: "succeeded", EventKind.FAILED: "failed", EventKind.STOPPED: "stopped"}


def notice_class(kind: str, *, held: bool) -> str | None:
    """The class of a job event as notices name it (None: not one anybody is told of);
    ``held``: the job is held by a person (its suspension was theirs, not the scheduler's)."""
    if kind in _FINAL:
        return _FINAL[EventKind(kind)]
    if kind == EventKind.REQUEUED or (kind == EventKind.SUSPENDED and not held):
        return PREEMPTED
    return None


def wanted(on: list[str] | tuple[str, ...], kind: str, *, held: bool) -> str | None:
    """The class of the event if ``on`` asks for it, else None."""
    cls = notice_class(kind, held=held)
    if cls is None:
        return None
    if cls in on or (cls in _FINAL.values() and ENDED in on):
        return cls
    return None
