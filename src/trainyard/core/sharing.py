"""Who may share one GPU with whom: a virtual cluster's ``gpuSharing`` rule, named once.

Fractional GPU shares put two jobs on one device, and a shared device lets one job read
the other's memory (CUDA offers no isolation between processes on one GPU without MIG).
So shares of different users meet on a device only where both users' VCs allow it; where
two VCs' rules differ, the stricter one applies.
"""

from __future__ import annotations

from enum import StrEnum


class GpuSharing(StrEnum):
    SAME_USER = "same-user"  # only the user's own jobs (the default)
    SAME_GROUP = "same-group"  # also jobs of users with whom the user shares a group
    ANYONE = "anyone"  # any job

    def stricter(self, other: GpuSharing) -> GpuSharing:
        """The stricter of the two rules (the one that allows fewer users)."""
        return min(self, other, key=_ORDER.index)


_ORDER = (GpuSharing.SAME_USER, GpuSharing.SAME_GROUP, GpuSharing.ANYONE)
DEFAULT_GPU_SHARING = GpuSharing.SAME_USER
GPU_SHARING_NAMES = tuple(rule.value for rule in _ORDER)
