"""Task cgroups: the CPU and memory a task may use and how many processes (and threads) it
may have, enforced by the kernel, and whether the kernel killed the task at its memory limit.

Stdlib only, and cheap to import: the local backend's supervisor imports it (from its
private copy, see ``backends/local/launcher``) on the submit→RUNNING path, and the
container runtime reads a container's OOM kills through :func:`oom_killed`.

Two layouts exist in the field, and both are supported:

* **v1** (legacy, or *hybrid* with an empty v2 tree beside it, as on Debian 12 under some
  container hosts): each controller has its own hierarchy, e.g. ``/sys/fs/cgroup/memory``
  and ``/sys/fs/cgroup/cpu`` (or ``cpu,cpuacct``). A task's cgroup is a directory in each:
  ``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes``, so that swap is no way
  around it), ``cpu.cfs_quota_us``/``cpu.cfs_period_us``, ``pids.max`` in the pids
  hierarchy (``/sys/fs/cgroup/pids``); the kernel counts OOM kills in
  ``memory.oom_control`` (``oom_kill N``). Task cgroups sit under the server's own cgroup
  of each hierarchy (``<own>/trainyard/...``): v1 allows that, and it keeps the tasks
  inside whatever limit the server itself runs under.
* **v2** (unified, ``/sys/fs/cgroup``): one hierarchy, ``memory.max`` (``memory.swap.max``
  = 0), ``cpu.max``, ``pids.max``, OOM kills in ``memory.events``. A cgroup that holds processes may not
  hand controllers to its children, so task cgroups cannot sit under the server's own
  cgroup; they sit under ``/trainyard`` at the root, whose ``cgroup.subtree_control`` must
  list the memory controller (systemd's does), and every level below it gets
  ``+memory +cpu +pids`` written to its own ``cgroup.subtree_control``.

``pids.max`` is what keeps one task from taking every process id of the host (a fork
past it fails with EAGAIN, in the task alone); where the pids controller is missing the
layout's note says so and the rest is enforced as before.

A node's layout is found once (:func:`detect`, by the backend); each task's cgroup is then
described by a plain JSON-able dict, a *plan* (:func:`task_plan`), that the supervisor acts
on: :func:`create` (before the task execs), :func:`join`, :func:`kill_all`,
:func:`oom_kills`, :func:`remove` (after it has ended). The plan is written into the task's
``spec.json``, so a restarted server finds the cgroup again by the task's key.
"""

from __future__ import annotations

import errno
import os
import signal
import time

# Stdlib-only and on the launch path: typing costs ~10 ms to import, so only mypy sees it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

OUT_OF_MEMORY = "OUT_OF_MEMORY"  # TaskStatus.reason when the kernel killed a task at its limit
CPU_PERIOD_US = 100_000  # the CFS period: a quota of cpu × this per period
MIN_CPU_QUOTA_US = 1_000  # the kernel refuses quotas below 1 ms
TOP_NAME = "trainyard"
_KILL_WAIT_SECONDS = 5.0


class CgroupLayout:
    """Where this node's task cgroups go.

    ``version`` is 1 or 2. ``memory``, ``cpu`` and ``pids`` are the directories that hold
    the task cgroups in each controller's hierarchy (the same directory on v2; ``cpu`` or
    ``pids`` is None where that controller is missing, and it is then not enforced; ``describe``
    says so for pids, ``note`` for CPU). ``anchors`` are the
    directories Trainyard did not create (the server's own cgroup, the v2 root): cleanup
    never removes them or anything above. ``note`` says what is not enforced, if anything.
    """

    def __init__(self, version: int, memory: str, cpu: str | None, anchors: tuple[str, ...], note: str = "",
                 pids: str | None = None) -> None:
        self.version = version
        self.memory = memory
        self.cpu = cpu
        self.anchors = anchors
        self.note = note
        self.pids = pids

    def __repr__(self) -> str:
        return f"CgroupLayout(v{self.version}, memory={self.memory!r}, cpu={self.cpu!r})"

    def describe(self) -> str:
        """One line for ``yard up``'s log."""
        what = "CPU and memory" if self.cpu is not None else "memory (not CPU)"
        # A missing pids controller is said here, at start-up, not in every task's message.
        processes = "" if self.pids is not None else "; process limits (task_pids_max) are not enforced: no usable " \
            "pids controller"
        return f"task {what} limits are enforced with cgroup v{self.version} under {self.memory}" + (
            f"; {self.note}" if self.note else "") + processes

    def under(self, name: str) -> CgroupLayout:
        """The same layout with task cgroups one level lower, in ``name`` (one server's own)."""
        return CgroupLayout(self.version, os.path.join(self.memory, name),
                            None if self.cpu is None else os.path.join(self.cpu, name), self.anchors, self.note,
                            None if self.pids is None else os.path.join(self.pids, name))


def detect(mounts: str = "/proc/self/mounts", own: str = "/proc/self/cgroup") -> CgroupLayout | str:
    """This node's layout, or why task limits cannot be enforced here (a sentence)."""
    try:
        with open(mounts) as f:
            table = [line.split() for line in f]
        with open(own) as f:
            memberships = [line.rstrip("\n").split(":", 2) for line in f if line.count(":") >= 2]
    except OSError as exc:
        return f"cannot read the cgroup mounts ({exc})"
    v1: dict[str, str] = {}  # controller -> mount point
    unified = None
    for fields in table:
        if len(fields) < 4:
            continue
        if fields[2] == "cgroup":
            for option in fields[3].split(","):
                v1.setdefault(option, _unescape(fields[1]))
        elif fields[2] == "cgroup2" and unified is None:
            unified = _unescape(fields[1])
    if "memory" in v1:
        return _v1_layout(v1, memberships)
    if unified is not None:
        return _v2_layout(unified)
    return "no cgroup memory controller is mounted (neither v1 nor v2 with the memory controller)"


def _v1_layout(mountpoints: dict[str, str], memberships: list[list[str]]) -> CgroupLayout | str:
    def own_dir(controller: str) -> str:
        mountpoint = mountpoints[controller]
        for _, controllers, path in memberships:
            if controller in controllers.split(","):
                candidate = os.path.join(mountpoint, path.lstrip("/"))
                # Inside a cgroup namespace the path may name nothing under this mount.
                return candidate if os.path.isdir(candidate) else mountpoint
        return mountpoint

    memory = own_dir("memory")
    if not os.access(memory, os.W_OK):
        return f"cannot create cgroups in {memory} (run the server as root)"
    cpu = own_dir("cpu") if "cpu" in mountpoints else None
    note = ""
    if cpu is not None and not os.access(cpu, os.W_OK):
        cpu, note = None, f"CPU limits are not enforced: cannot create cgroups in {own_dir('cpu')}"
    elif cpu is None:
        note = "CPU limits are not enforced: no cgroup v1 cpu controller is mounted"
    pids = own_dir("pids") if "pids" in mountpoints else None
    if pids is not None and not os.access(pids, os.W_OK):
        pids = None
    anchors = tuple(d for d in (memory, cpu, pids) if d is not None)
    return CgroupLayout(1, os.path.join(memory, TOP_NAME), None if cpu is None else os.path.join(cpu, TOP_NAME),
                        anchors, note, None if pids is None else os.path.join(pids, TOP_NAME))


def _v2_layout(root: str) -> CgroupLayout | str:
    enabled = _words(os.path.join(root, "cgroup.subtree_control"))
    if "memory" not in enabled:
        return f"the memory controller is not enabled in {root}/cgroup.subtree_control"
    if not os.access(root, os.W_OK):
        return f"cannot create cgroups in {root} (run the server as root)"
    top = os.path.join(root, TOP_NAME)
    note = "" if "cpu" in enabled else f"CPU limits are not enforced: the cpu controller is not enabled in {root}"
    return CgroupLayout(2, top, top if "cpu" in enabled else None, (root,), note, top if "pids" in enabled else None)


def task_plan(layout: CgroupLayout, name: str, cpu_milli: int, memory_mb: int,
              pids_max: int | None = None) -> dict[str, Any] | None:
    """The plan of one task's cgroup (see the module docstring); None when it asks for no
    limit. ``pids_max``: the most processes and threads the task may have at once."""
    memory_bytes = max(0, memory_mb) * 1024 * 1024
    cpu = layout.cpu if cpu_milli > 0 else None
    pids = layout.pids if pids_max else None
    if not memory_bytes and cpu is None and pids is None:
        return None
    dirs = {}
    if memory_bytes:
        dirs["memory"] = os.path.join(layout.memory, name)
    if cpu is not None:
        dirs["cpu"] = os.path.join(cpu, name)
    if pids is not None:
        dirs["pids"] = os.path.join(pids, name)
    return {
        "pids": dirs.get("pids"),
        "pids_max": pids_max if pids is not None else 0,
        "version": layout.version,
        "dirs": sorted(set(dirs.values())),
        "memory": dirs.get("memory"),
        "cpu": dirs.get("cpu"),
        "anchors": list(layout.anchors),
        "memory_bytes": memory_bytes,
        "cpu_quota_us": max(MIN_CPU_QUOTA_US, cpu_milli * CPU_PERIOD_US // 1000) if cpu is not None else 0,
    }


def create(plan: dict[str, Any]) -> None:
    """Make the task's cgroup(s) and set its limits; OSError when that fails."""
    for directory in plan["dirs"]:
        _make_dirs(directory, plan["anchors"], plan["version"])
    if plan["memory"] is not None:
        memory, limit = plan["memory"], str(plan["memory_bytes"])
        if plan["version"] == 1:
            _write(memory, "memory.limit_in_bytes", limit)
            # Swap is counted with memory in memsw: at the same figure, no swapping past it.
            if os.path.exists(os.path.join(memory, "memory.memsw.limit_in_bytes")):
                _write(memory, "memory.memsw.limit_in_bytes", limit)
        else:
            _write(memory, "memory.max", limit)
            if os.path.exists(os.path.join(memory, "memory.swap.max")):
                _write(memory, "memory.swap.max", "0")
    if plan.get("pids") is not None:  # plans written before pids were limited have none
        _write(plan["pids"], "pids.max", str(plan["pids_max"]))
    if plan["cpu"] is not None:
        quota = str(plan["cpu_quota_us"])
        if plan["version"] == 1:
            _write(plan["cpu"], "cpu.cfs_period_us", str(CPU_PERIOD_US))
            _write(plan["cpu"], "cpu.cfs_quota_us", quota)
        else:
            _write(plan["cpu"], "cpu.max", f"{quota} {CPU_PERIOD_US}")


def join(plan: dict[str, Any], pid: int = 0) -> None:
    """Move ``pid`` (0: the caller) into the task's cgroup(s); OSError when that fails."""
    for directory in plan["dirs"]:
        _write(directory, "cgroup.procs", str(pid or os.getpid()))


def members(plan: dict[str, Any]) -> list[int]:
    """The pids in the task's cgroup(s) now (none once it is gone)."""
    pids: set[int] = set()
    for directory in plan["dirs"]:
        try:
            with open(os.path.join(directory, "cgroup.procs")) as f:
                pids.update(int(line) for line in f if line.strip())
        except OSError:
            continue
    return sorted(pids)


def kill_all(plan: dict[str, Any], wait_seconds: float = _KILL_WAIT_SECONDS) -> list[int]:
    """SIGKILL whatever still runs in the task's cgroup (a process that left the task's
    process group stays in its cgroup) and wait, a while, until none is left; the pids
    still there after the wait."""
    deadline = time.monotonic() + wait_seconds
    left = members(plan)
    while left:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() >= deadline:
            break
        time.sleep(0.01)
        left = members(plan)
    return left


def oom_kills(plan: dict[str, Any]) -> int:
    """How many processes of the task the kernel killed at its memory limit so far."""
    return 0 if plan["memory"] is None else (oom_kill_count(plan["memory"]) or 0)


def oom_kill_count(path: str) -> int | None:
    """The OOM kills the kernel counted in the memory cgroup at ``path`` (v1 or v2); None
    when it has no such count (no such cgroup).

    v2: ``oom_kill`` of ``memory.events``. v1: ``oom_kill`` of ``memory.oom_control``
    (kernels since 4.13); on older ones, ``memory.failcnt`` > 0 (the limit was hit) is the
    only sign, counted as one.
    """
    for name in ("memory.events", "memory.oom_control"):
        fields = _keyed(os.path.join(path, name))
        if fields is not None and "oom_kill" in fields:
            return fields["oom_kill"]
    try:
        with open(os.path.join(path, "memory.failcnt")) as f:
            return 1 if int(f.read().strip() or 0) > 0 else 0
    except (OSError, ValueError):
        return None


def oom_killed(path: str) -> bool:
    """Whether the kernel killed a process of the memory cgroup at ``path`` at its limit
    (for the container runtime, which reads it from a container's cgroup)."""
    return bool(oom_kill_count(path))


def remove(plan: dict[str, Any]) -> bool:
    """Remove the task's cgroup(s), and the levels above that are left empty (never an
    anchor); True when they are gone. A cgroup that still holds a process stays."""
    gone = True
    for directory in plan["dirs"]:
        try:
            os.rmdir(directory)
        except FileNotFoundError:
            pass
        except OSError:
            gone = False
            continue
        _remove_empty_parents(os.path.dirname(directory), plan["anchors"])
    return gone


def _make_dirs(directory: str, anchors: list[str], version: int) -> None:
    """``mkdir -p`` below the anchor; on v2, each new level hands the memory and cpu
    controllers down. A level removed meanwhile by another task's cleanup is made again."""
    anchor = next((a for a in anchors if directory.startswith(a.rstrip("/") + "/")), None)
    if anchor is None:
        raise OSError(errno.EINVAL, f"{directory} is not under a cgroup Trainyard may use")
    parts = os.path.relpath(directory, anchor).split(os.sep)
    for attempt in range(5):
        try:
            current = anchor
            for index, part in enumerate(parts):
                current = os.path.join(current, part)
                try:
                    os.mkdir(current)
                except FileExistsError:
                    pass
                if version == 2 and index < len(parts) - 1:
                    _enable_controllers(current)
            return
        except FileNotFoundError:
            if attempt == 4:
                raise


def _enable_controllers(directory: str) -> None:
    enabled = _words(os.path.join(directory, "cgroup.subtree_control"))
    wanted = [c for c in ("memory", "cpu", "pids") if c not in enabled]
    available = _words(os.path.join(directory, "cgroup.controllers"))
    for controller in wanted:
        if controller in available:
            _write(directory, "cgroup.subtree_control", f"+{controller}")


def _remove_empty_parents(directory: str, anchors: list[str]) -> None:
    while directory not in anchors and any(directory.startswith(a.rstrip("/") + "/") for a in anchors):
        try:
            os.rmdir(directory)
        except OSError:  # another task's cgroup is in it (or it is gone already)
            return
        directory = os.path.dirname(directory)


def _write(directory: str, name: str, value: str) -> None:
    # One write(2) per value: cgroup files take a whole value per write.
    fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _words(path: str) -> set[str]:
    try:
        with open(path) as f:
            return set(f.read().split())
    except OSError:
        return set()


def _keyed(path: str) -> dict[str, int] | None:
    """A flat-keyed cgroup file (``name value`` lines); None when it cannot be read."""
    try:
        with open(path) as f:
            lines = [line.split() for line in f]
    except OSError:
        return None
    values = {}
    for fields in lines:
        if len(fields) == 2 and fields[1].lstrip("-").isdigit():
            values[fields[0]] = int(fields[1])
    return values


def _unescape(path: str) -> str:
    """A path of /proc/self/mounts, whose spaces and tabs are octal escapes."""
    return path.replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
