"""What a task's directory says of how it ended, beyond its exit record: what ``containerrun``
recorded of its image and its container's OOM kills, and the supervisor's last words."""

from __future__ import annotations

import os
from pathlib import Path

from trainyard.backends.base import TaskStatus
from trainyard.backends.containers import with_image_pull, with_oom_record
from trainyard.backends.local import containerrun, taskfiles
from trainyard.backends.local.launcher import last_lines


def with_container_records(status: TaskStatus, task_dir: Path) -> TaskStatus:
    """``status`` with what ``containerrun`` recorded: how the task's image came to the node
    (``containers.with_image_pull``), and OOM kills in its container's cgroup."""
    status = with_image_pull(status, taskfiles.read_json(str(task_dir / containerrun.IMAGE_RECORD)))
    if status.running or not status.image_pull:
        return status
    return with_oom_record(status, taskfiles.read_json(str(task_dir / containerrun.CONTAINER_RECORD)))


def supervisor_log_note(task_dir: Path) -> str:
    """``": <the last line of supervisor.log>"`` (a traceback's last line names the error), or ""."""
    try:
        with open(task_dir / taskfiles.SUPERVISOR_LOG, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))
            text = f.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
    return f": {last_lines(text)}" if text.strip() else ""
