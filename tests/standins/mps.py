"""THE MPS STAND-IN: NVIDIA's Multi-Process Service without a GPU (issue 36).

Three fake programs in ``tests/standins/mps-bin/`` (standard library only):
``nvidia-cuda-mps-control``, the control daemon and its command shell, which records what
it is told and by whom (uid), and the daemon's environment and cgroups, in the user's
``$CUDA_MPS_LOG_DIRECTORY/standin.jsonl``; ``nvidia-smi``, the driver's view of four
devices (``-q -x``: minor numbers, UUIDs, memory), where Slurm's node step looks for it,
beside the control program; and ``cuda-client``, what a CUDA program under MPS would
meet: it reports the MPS environment its task got and its owner's daemon, and fails an
allocation past its memory limit as CUDA does ("CUDA error: out of memory"). Everything on
the other side is real: the backends' plans, the local supervisor's waiter and Slurm's task
runner (``mps-step.py``, as root on the node) starting and quitting the daemon as the
task's account, the directories and their owners. What no stand-in shows (the real daemon's
limits on a real device) is ``scripts/gpu-check.sh``'s, on a machine with a GPU.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

BIN = Path(__file__).parent / "mps-bin"
CONTROL = BIN / "nvidia-cuda-mps-control"
CLIENT = BIN / "cuda-client"
SMI = BIN / "nvidia-smi"


def records(root: Path, pattern: str = "*/log/standin.jsonl") -> list[dict[str, Any]]:
    """What every user's fake daemon under ``root`` (``mps_root``) was told, in time order
    (``pattern``: where the users' folders lie below it)."""
    found = []
    for log in root.glob(pattern):
        found += [json.loads(line) for line in log.read_text().splitlines() if line]
    return sorted(found, key=lambda r: r["time"])
