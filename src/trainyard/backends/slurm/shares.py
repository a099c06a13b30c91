"""Enforced GPU shares on Slurm, as the server plans them (issue 36): which tasks, and each
one's ``mps.json``, which the node's ``mps-step.py`` (``slurm/mpsstep``) acts on.

A task given part of a GPU, run as its owner's account in its sandbox (per-user accounts:
``yard up`` as root), holds its owner's MPS daemon of that device on its node for as long as
it runs; bare tasks (the server's own account), containers and whole GPUs are untouched.
The daemons' folders are node-local: ``<root>/<node>/gpu<N>/<uid>-<user>`` under ``root``
(``DEFAULT_ROOT/<the state directory's hash>``: one per server, short enough for MPS's
unix sockets), hidden from every sandbox but for the task's own pipe directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainyard.backends import mps
from trainyard.backends.base import TaskLaunch
from trainyard.backends.gpushares import ENFORCEMENT_MODES, UNENFORCED
from trainyard.backends.slurm.images import _NODE_NAME
from trainyard.backends.taskuser import TaskUser
from trainyard.core.names import USER_NAME

DEFAULT_ROOT = "/run/trainyard-mps"
NODE_STEP = "mps-step.py"  # in <state_dir>/bin, beside the task runner, with a copy of backends/mps.py
NODE_COPY = "mps.py"


def share_note(mode: str, isolated: bool) -> str:
    """Why fractional GPUs are not enforced on this Slurm backend ("" where they are, on the
    nodes that have MPS; a task on a node without it says so in its status)."""
    if mode not in ENFORCEMENT_MODES:
        raise ValueError(f"gpu_share_enforcement must be one of {', '.join(ENFORCEMENT_MODES)}, got {mode!r}")
    if mode == "off":
        return UNENFORCED.format(why=" (gpu_share_enforcement: off)")
    if not isolated:
        return UNENFORCED.format(why=" on Slurm without per-user task accounts (the node starts each user's MPS "
                                 "daemon as their account: yard up as root, with bubblewrap on the nodes)")
    return ""


def summary(note: str, root: str, threads: bool) -> str:
    """The start-up line."""
    if note:
        return note
    what = "memory and compute (active thread percentage)" if threads else "memory"
    return (f"fractional GPU shares on Slurm are enforced by NVIDIA MPS: each task gets at most its share of the "
            f"device's {what}, through one MPS daemon per user per device on each node, under {root} there; a "
            "node without nvidia-cuda-mps-control and nvidia-smi runs such a task unenforced and its status says so")


def share_plan(task: TaskLaunch, user: TaskUser, holder: str, *, root: str, control: str | None,
               threads: bool) -> dict[str, Any] | None:
    """The task's ``mps.json`` (``slurm/mpsstep``), or None for a task that holds no part of a
    GPU or runs in a container (its engine does not reach the node's daemon)."""
    shares = [(index, milli) for index, milli in zip(task.gpus, task.gpu_milli, strict=False)
              if 0 < milli < mps.WHOLE_MILLI]
    if not shares or task.image is not None:
        return None
    if not _NODE_NAME.fullmatch(task.node):
        raise ValueError(f"node {task.node!r}: a name unfit for a path; its MPS folder cannot be named")
    [(index, milli)] = shares  # a fraction is below one GPU: one device
    return {
        "node": task.node, "gpu": int(index), "milli": int(milli), "base": root,
        "root": f"{root}/{task.node}/gpu{int(index)}", "control": control,
        "key": f"{user.uid}-{task.user}" if USER_NAME.fullmatch(task.user) else str(user.uid),
        "uid": user.uid, "gid": user.gid, "groups": list(user.groups()), "holder": holder,
        "threads": mps.thread_percentage(milli) if threads else None,
    }


def pipe_dir(plan: dict[str, Any]) -> Path:
    """Where the task's client finds its owner's daemon: bound into its sandbox, writable."""
    return Path(mps.pipe_dir(plan))
