"""Resource arithmetic: GPUs and CPUs in integer thousandths, memory in MiB.

Fractions of a GPU or a core are stored as integers (milli-units) so that sums and
comparisons are exact; 0.25 GPU is 250 milli-GPU.
"""

from __future__ import annotations

MILLI = 1000


def to_milli(value: float) -> int:
    """Convert a user-facing amount (e.g. ``0.25`` GPU, ``1.5`` CPU) to milli-units."""
    return int(round(value * MILLI))


def from_milli(milli: int) -> float | int:
    """Convert milli-units back to the user-facing amount, as an int when whole."""
    if milli % MILLI == 0:
        return milli // MILLI
    return milli / MILLI


def gpu_devices_needed(gpu_milli: int) -> int:
    """How many devices a request touches: whole GPUs use N devices, a fraction uses one."""
    if gpu_milli <= 0:
        return 0
    if gpu_milli < MILLI:
        return 1
    return gpu_milli // MILLI
