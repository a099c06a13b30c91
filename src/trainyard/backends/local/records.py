"""Task-directory records the backend acts on: the claim (``pid.json``), a stop request
(``stop.json``), the exit records (``exit.json``, and ``status.json`` when the supervisor
was lost) and the spec (``spec.json``).

File names and the atomic JSON helpers are in ``taskfiles``.
"""

from __future__ import annotations

import math
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from trainyard.backends.base import TaskKey, TaskStatus
from trainyard.backends.local import taskfiles
from trainyard.backends.local.taskenv import gpu_environment


@dataclass(frozen=True)
class Claim:
    """What ``pid.json`` says: who supervises the task, its process group, and its waiter."""

    boot_id: str | None
    supervisor: tuple[int, int] | None  # (pid, start time); None: abandoned by a backend
    task: tuple[int, int] | None  # (pgid, leader start time); None: not forked yet
    note: str = ""
    waiter: tuple[int, int] | None = None  # (pid, start time); None: not forked yet, or older


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
                waiter=pid_and_start(record.get("waiter"), "pid"),
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
        return {**(previous or {}), "deadline": earlier}
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


def exit_status(key: TaskKey, record: dict[str, Any]) -> TaskStatus:
    """The status an ``exit.json`` record reports."""
    sig = record.get("signal")
    notes = [record["message"]] if record.get("message") else []
    if isinstance(sig, int):
        notes.append(f"killed by {_signal_name(sig)}")
    reason = record.get("reason")
    return TaskStatus(key, running=False, exit_code=record.get("exit_code"), signal=sig, message="; ".join(notes),
                      finished_at=_when(record.get("finished_at")), reason=reason if isinstance(reason, str) else "")


def _when(value: Any) -> datetime | None:
    """An ISO 8601 timestamp of a record, as an aware datetime; None if absent or garbled."""
    if not isinstance(value, str):
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def same_task(spec: dict[str, Any], script: str, job_env: Mapping[str, str]) -> bool:
    """Whether ``spec.json`` describes the task with this script and job env."""
    recorded = spec.get("job_env")
    wanted = dict(job_env)
    if recorded is None:  # written before job_env was recorded: compare what its env shows
        env = spec.get("env") or {}
        pinned = gpu_environment(())  # set by the backend, whatever the job asked for
        wanted = {name: value for name, value in wanted.items() if name not in pinned}
        recorded = {name: env.get(name) for name in wanted}
    return spec.get("script") == script and recorded == wanted


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def suspend_signal(name: str) -> int:
    """The number of the signal named ``name`` ("SIGUSR1" or "USR1"); ValueError if none."""
    try:
        return int(signal.Signals[name if name.startswith("SIG") else f"SIG{name}"])
    except KeyError:
        raise ValueError(f"no signal is named {name!r}") from None
