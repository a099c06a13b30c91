"""Task-directory records the backend acts on: the claim (``pid.json``) and a stop request
(``stop.json``). File names and the atomic JSON helpers are in ``taskfiles``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from trainyard.backends.local import taskfiles


@dataclass(frozen=True)
class Claim:
    """What ``pid.json`` says: who supervises the task, and the task's process group."""

    boot_id: str | None
    supervisor: tuple[int, int] | None  # (pid, start time); None: abandoned by a backend
    task: tuple[int, int] | None  # (pgid, leader start time); None: not forked yet
    note: str = ""

    @classmethod
    def parse(cls, record: dict[str, Any]) -> Claim:
        def pid_and_start(entry: dict[str, Any] | None, pid_field: str) -> tuple[int, int] | None:
            return None if entry is None else (int(entry[pid_field]), int(entry["start_time"]))

        try:
            return cls(
                boot_id=record.get("boot_id"),
                supervisor=pid_and_start(record.get("supervisor"), "pid"),
                task=pid_and_start(record.get("task"), "pgid"),
                note=str(record.get("abandoned", "")),
            )
        except (KeyError, TypeError, ValueError):
            return cls(None, None, None, note=f"unreadable {taskfiles.PID}")


def stop_request(previous: dict[str, Any] | None, grace: float, now: float) -> dict[str, Any]:
    """The ``stop.json`` to write for a stop with ``grace`` seconds requested at ``now``.

    ``deadline`` (seconds since the epoch: it must mean the same after a restart) is when
    the task's group is to be SIGKILLed. A repeated stop never postpones an earlier one.
    """
    deadline = now + grace
    earlier = stop_deadline(previous)
    if earlier is not None and earlier < deadline:
        return dict(previous or {})
    requested_at = datetime.fromtimestamp(now, UTC).isoformat()
    return {"grace_seconds": grace, "requested_at": requested_at, "deadline": deadline}


def stop_deadline(record: dict[str, Any] | None) -> float | None:
    """The SIGKILL deadline of a ``stop.json`` record; None when there is none (or no valid one)."""
    if record is None:
        return None
    deadline = record.get("deadline")
    if "deadline" not in record:  # written before deadlines were recorded
        try:
            requested = datetime.fromisoformat(record["requested_at"]).timestamp()
            deadline = requested + float(record["grace_seconds"])
        except (KeyError, TypeError, ValueError):
            return None
    if isinstance(deadline, bool) or not isinstance(deadline, (int, float)) or not math.isfinite(deadline):
        return None
    return float(deadline)
