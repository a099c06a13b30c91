"""Whether a node enforces fractional GPU shares (MPS, ``backends/mps``), and each task's plan.

Decided once per backend: the admin's setting (``gpu_share_enforcement``: ``auto`` uses
MPS where it can, ``off`` never), an NVIDIA GPU (simulated slots have nothing to share),
and ``nvidia-cuda-mps-control`` on the server's PATH. Where shares are not enforced, the
backend's ``gpu_share_note`` says why: at start-up, and as a warning on every job that
asks for a fraction of a GPU; such tasks run as before (bookkeeping only).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainyard.backends import mps
from trainyard.backends.base import GpuInfo, TaskLaunch
from trainyard.backends.taskuser import TaskUser
from trainyard.core.names import USER_NAME

ENFORCEMENT_MODES = ("auto", "off")
UNENFORCED = ("fractional GPU shares are not enforced{why}: a task given part of a GPU can use all of its "
              "memory and compute, and starve or crash the task beside it")


@dataclass(frozen=True)
class ShareEnforcement:
    """How this node holds tasks to their GPU shares: ``control`` None: it does not (``note``)."""

    control: str | None
    root: str
    threads: bool = False
    note: str = ""

    @property
    def summary(self) -> str:
        """One line for the start-up log."""
        if self.control is None:
            return self.note
        what = "memory and compute (active thread percentage)" if self.threads else "memory"
        return (f"fractional GPU shares are enforced by NVIDIA MPS ({self.control}): each task gets at most its "
                f"share of the device's {what}, through one MPS daemon per user, under {self.root}")


def find_enforcement(mode: str, gpus: Sequence[GpuInfo], root: str, *, threads: bool = False,
                     control: str | None = None) -> ShareEnforcement:
    """The node's enforcement for ``mode`` (``ENFORCEMENT_MODES``); ``control``: the control
    program to use (None: ``nvidia-cuda-mps-control`` on PATH)."""
    if mode not in ENFORCEMENT_MODES:
        raise ValueError(f"gpu_share_enforcement must be one of {', '.join(ENFORCEMENT_MODES)}, got {mode!r}")
    if mode == "off":
        return ShareEnforcement(None, root, note=UNENFORCED.format(why=" (gpu_share_enforcement: off)"))
    if not any(not gpu.simulated for gpu in gpus):
        return ShareEnforcement(None, root, note=UNENFORCED.format(why=" (no NVIDIA GPU here, so no MPS)"))
    found = control or shutil.which(mps.CONTROL)
    if found is None:
        return ShareEnforcement(None, root, note=UNENFORCED.format(
            why=f" ({mps.CONTROL} is not installed: NVIDIA's Multi-Process Service enforces them)"))
    return ShareEnforcement(found, root, threads=threads)


def task_plan(enforcement: ShareEnforcement, task: TaskLaunch, gpus: Sequence[GpuInfo], account: TaskUser | None,
              holder: str) -> dict[str, Any] | None:
    """The task's ``mps`` plan for its spec (``backends/mps``), its owner's directories made
    (``account``: None, the server's own); None for a task that holds no part of a GPU (whole
    GPUs are untouched), one with an image (a container does not reach the node's daemon),
    or where shares are not enforced."""
    shares = [(index, milli) for index, milli in zip(task.gpus, task.gpu_milli, strict=False)
              if 0 < milli < mps.WHOLE_MILLI]
    if enforcement.control is None or not shares or task.image is not None:
        return None
    uid, gid, groups = ((os.geteuid(), os.getegid(), []) if account is None
                        else (account.uid, account.gid, account.groups()))
    devices = {gpu.index: gpu for gpu in gpus}
    clients: list[list[Any]] = []
    daemon: list[list[Any]] = []
    for index, milli in shares:
        gpu = devices[index]
        mb = mps.share_mb(milli, gpu.memory_mb)
        # The client names its device by UUID (CUDA_VISIBLE_DEVICES renumbers from 0);
        # the daemon, which sees every device in PCI order, by NVML's index.
        clients.append([gpu.uuid or str(task.gpus.index(index)), mb])
        daemon.append([index, mb])
    plan = {
        "control": enforcement.control,
        "root": enforcement.root,
        # A daemon per Trainyard user, even where users share one account (``run_as``).
        "key": f"{uid}-{task.user}" if USER_NAME.fullmatch(task.user) else str(uid),
        "uid": uid,
        "gid": gid,
        "groups": list(groups),
        "holder": holder,
        "clients": clients,
        "devices": daemon,
        "threads": min(mps.thread_percentage(milli) for _, milli in shares) if enforcement.threads else None,
    }
    mps.prepare(plan)
    return plan

