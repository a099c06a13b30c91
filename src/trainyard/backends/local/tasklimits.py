"""Which CPU and memory limits the local backend's tasks get on this node (``task_limits``):
where their cgroups go, or why there are none."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from pathlib import Path

from trainyard.backends import cgroups

log = logging.getLogger("trainyard.backends.local.backend")

LIMIT_MODES = ("auto", "cgroups", "none")


def limits_layout(
    mode: str, state_dir: Path, detect: Callable[[], cgroups.CgroupLayout | str] = cgroups.detect
) -> tuple[cgroups.CgroupLayout | None, str]:
    """Where this backend's task cgroups go, and the note for tasks when limits are off.

    ``auto`` enforces limits where cgroups work here and says once (in the server's log)
    when they do not; ``cgroups`` requires them (RuntimeError: ``yard up`` refuses to
    start); ``none`` never enforces them. Each backend has its own level, named after its
    state directory, so that two servers' tasks of the same key never share a cgroup and a
    restarted server finds its tasks' cgroups again.
    """
    if mode not in LIMIT_MODES:
        raise ValueError(f"task_limits must be one of {', '.join(LIMIT_MODES)}, got {mode!r}")
    if mode == "none":
        return None, ""
    found = detect()
    if isinstance(found, str):
        if mode == "cgroups":
            raise RuntimeError(f"task_limits is cgroups, but {found}")
        log.warning("task CPU and memory limits are NOT enforced on this node: %s", found)
        return None, f"its CPU and memory limits are not enforced on this node: {found}"
    own = "local-" + hashlib.sha256(str(state_dir).encode()).hexdigest()[:12]
    log.info("%s", found.describe())
    return found.under(own), ""
