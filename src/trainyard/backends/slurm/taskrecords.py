"""What a Slurm task's runner leaves in the task's folder, as the server reads it: its exit
status, a platform fault it met instead, its OOM kills, its image pull, and the small
text and JSON files behind them (``SlurmBackend.observe`` and ``sample``)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainyard.backends.base import TaskKey, TaskStatus
from trainyard.backends.cgroups import OUT_OF_MEMORY
from trainyard.backends.containercgroup import CONTAINER_RECORD
from trainyard.backends.containers import with_oom_record
from trainyard.backends.datacache import DATASET_UNAVAILABLE, failure
from trainyard.backends.sandboxjoin import SANDBOX_NOT_FOUND_HINT
from trainyard.backends.slurm.mpsstep import NOTE as SHARE_NOTE
from trainyard.backends.slurm.nodes import figure

EXIT = "exit"
# The runner's record of a platform fault that kept the task from starting (a port of its
# held on its node): the task ends with no exit status, and the controller retries it.
FAULT = "fault"
OOM = "oom"  # the runner's count of the task's processes killed at its memory limit, if any


def read_text(path: Path, *, strip: bool = True) -> str | None:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    return text.strip() if strip else text


def pull_record(task_dir: Path) -> dict[str, Any] | None:
    """The task runner's ``image.json``, with a failed pull's last line of output (its
    ``pull.out``) as ``said``, as the local backend records it (``containers.with_image_pull``)."""
    record = read_json(task_dir / "image.json")
    if record is not None and not record.get("ok") and "said" not in record:
        lines = [line.strip() for line in (read_text(task_dir / "pull.out") or "").splitlines() if line.strip()]
        record["said"] = lines[-1][-500:] if lines else ""
    return record


def read_json(path: Path) -> dict[str, Any] | None:
    text = read_text(path)
    if not text:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


def exit_status(key: TaskKey, task_dir: Path) -> TaskStatus | None:
    """The exit status the task runner (or srun, standing in) recorded, if any; reason
    OUT_OF_MEMORY when the task failed after the kernel killed a process of its step at
    its memory limit (the runner's ``oom`` file), or of its container (``container.json``).
    A platform fault the runner recorded instead (``fault``: it did not start the task)
    comes first: no exit status, and the fault as the reason (LOST, retried as a new attempt)."""
    if (fault := read_text(task_dir / FAULT)) is not None:
        return TaskStatus(key, running=False, message=" ".join(fault.split())[:500] or "a platform fault on its node")
    text = read_text(task_dir / EXIT)
    if text is None or not text.isdigit():
        return None
    code = int(text)
    kills = read_text(task_dir / OOM) or "0"
    reason = OUT_OF_MEMORY if code != 0 and kills.isdigit() and int(kills) > 0 else ""
    failed = failure(str(task_dir)) if code == 127 else None
    if failed is not None and failed[1]:  # it may pass (a source down): a platform fault, retried as a new attempt
        return TaskStatus(key, running=False, reason=DATASET_UNAVAILABLE, message=failed[0][:1000])
    message = failed[0] if failed is not None else ""
    reason = DATASET_UNAVAILABLE if message else reason  # not a command that was not found
    if code in (126, 127) and not message and (task_dir / "sandbox.json").exists():
        message = SANDBOX_NOT_FOUND_HINT
    status = TaskStatus(key, running=False, exit_code=code, signal=code - 128 if 128 < code < 128 + 65 else None,
                        reason=reason, message=message or read_text(task_dir / SHARE_NOTE) or "")
    # A container's kills are counted in its own cgroup, outside the step's (the runner's
    # container-cgroup.py records them).
    return with_oom_record(status, read_json(task_dir / CONTAINER_RECORD))


def fresh(record: Mapping[str, Any], after: float) -> bool:
    at = figure(record, "at")
    return at is not None and at >= after
