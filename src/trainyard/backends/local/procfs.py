"""Process identity and liveness from Linux /proc, safe against recycled pids.

Stdlib only: the supervisor imports this module and must start fast.

A pid alone does not name a process: once a process is reaped its pid can be reused.
A process is therefore named by ``(pid, start_time)`` (field 22 of ``/proc/PID/stat``,
in clock ticks since boot) together with the boot id, and nothing is signalled unless
its start time still matches.
"""

from __future__ import annotations

import os
import signal

_DEAD_STATES = frozenset("ZXx")  # zombie or dead: the process has exited
_boot_id: str | None = None


def boot_id() -> str:
    """This boot's random id; start times from another boot name nothing alive now."""
    global _boot_id
    if _boot_id is None:
        with open("/proc/sys/kernel/random/boot_id") as f:
            _boot_id = f.read().strip()
    return _boot_id


def read_stat(pid: int) -> tuple[str, int, int] | None:
    """``(state, pgrp, start_time)`` of ``pid``, or None when no such process exists."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may contain spaces and parentheses; it ends at the
    # last ")". Fields from 3 on follow, so field N is at index N - 3.
    fields = data[data.rindex(b")") + 2 :].split()
    return fields[0].decode(), int(fields[2]), int(fields[19])


def start_time(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot, or None when it is gone."""
    stat = read_stat(pid)
    return None if stat is None else stat[2]


def is_alive(pid: int, started: int, boot: str | None = None) -> bool:
    """Whether the process ``(pid, started)`` of boot ``boot`` is still running."""
    if boot is not None and boot != boot_id():
        return False
    stat = read_stat(pid)
    return stat is not None and stat[0] not in _DEAD_STATES and stat[2] == started


def group_members(pgid: int) -> list[int]:
    """Pids of the running (not zombie) processes in process group ``pgid``."""
    members = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        stat = read_stat(int(name))
        if stat is not None and stat[1] == pgid and stat[0] not in _DEAD_STATES:
            members.append(int(name))
    return members


def group_alive(pgid: int, leader_started: int, boot: str | None = None) -> bool:
    """Whether the process group led by ``(pgid, leader_started)`` still has a live member.

    The kernel never hands out a pid that is still in use as a process-group id, so if
    the pid ``pgid`` now belongs to a process with another start time, our group has
    ended; if no process has that pid, any member of group ``pgid`` is one of ours.
    """
    if boot is not None and boot != boot_id():
        return False
    leader = read_stat(pgid)
    if leader is not None and leader[2] != leader_started:
        return False
    return bool(group_members(pgid))


def signal_process(pid: int, started: int, sig: int, boot: str | None = None) -> bool:
    """Send ``sig`` to ``(pid, started)`` if it is still that process; True if sent.

    A pidfd pins the process between the start-time check and the signal, so a pid
    recycled in between cannot be hit.
    """
    if boot is not None and boot != boot_id():
        return False
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return False
    try:
        if not is_alive(pid, started):
            return False
        signal.pidfd_send_signal(pidfd, sig)
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(pidfd)


def signal_group(pgid: int, leader_started: int, sig: int, boot: str | None = None) -> bool:
    """Send ``sig`` to the process group ``(pgid, leader_started)`` if it lives; True if sent."""
    if not group_alive(pgid, leader_started, boot):
        return False
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True
