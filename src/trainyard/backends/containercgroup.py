"""A container's parent memory cgroup: it holds the task's memory limit, and tells an OOM
kill apart from any other SIGKILL. Shared by both backends' container paths.

Why not the engine's ``--memory``: the kernel counts an OOM kill in the cgroup of the
process it killed, the container's own, which the OCI runtime deletes as the container
ends, and the engine's record of it is wrong on cgroup v1 hosts (Podman 4.3: OOMKilled
false). So the engine puts the container (``--cgroup-parent``) and its monitor in a cgroup
of Trainyard's that holds the limit, and :func:`run_in` reads the kill from it: on v1 an
eventfd on its ``memory.oom_control`` (notified when the limit there invokes the OOM
killer; its ``oom_kill`` count and ``memory.failcnt`` stay 0 for kills in a child, as
measured on 6.x kernels), on v2 its ``memory.events`` (hierarchical).

Stdlib only, and Python 3.10+ (``os.eventfd``). The local backend's task process imports
it from the supervisor's private copy (``local/containerrun``); the Slurm backend installs
this file beside its task runner (``slurm/runners``), which runs it on the compute node,
in the task's step, as ``python3 -I -S container-cgroup.py check|run TASK_DIR ...``:

* ``check TASK_DIR``: exit 0 when the container of the task (``TASK_DIR/container.cgroup``:
  its name and memoryMB, written by the backend) can sit in such a cgroup on this node
  (a memory controller Trainyard may write to); else say why on stdout (the task's log)
  and exit 1, and the runner gives the engine the limit itself.
* ``run TASK_DIR ARGV...``: make the cgroup, run ARGV (the engine's client, with
  ``--cgroup-parent``) in it, record the OOM kills in ``TASK_DIR/container.json``, remove
  the cgroup, and end as the client ended.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

# Stdlib-only and on the launch path: typing costs ~10 ms to import, so only mypy sees it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

CONTAINERS_CGROUP = "trainyard/containers"
CONTAINER_RECORD = "container.json"  # in the task directory: the OOM kills the container's cgroup saw
CGROUP_INPUT = "container.cgroup"  # in a Slurm task's directory: {"name", "memory_mb"} (``check``, ``run``)
# The engine's own "could not run the container" status (podman and docker use 125).
CANNOT_RUN = 125
_CGROUP_WAIT_SECONDS = 5.0
# Signals the task's group gets (a stop, a suspend) that this parent of the client outlives.
_OUTLIVED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGQUIT)


def memory_cgroup(name: str, memory_mb: int, mounts: str = "/proc/self/mounts") -> dict[str, Any] | None:
    """The plan of a container's parent cgroup (``relative``: the engine's
    ``--cgroup-parent``, the same on every node; ``memory``: its directory in the memory
    hierarchy; ``roots``: every hierarchy the engine makes it in; ``bytes``: the limit).
    None when there is no limit or no memory controller."""
    if memory_mb <= 0:
        return None
    try:
        with open(mounts) as f:
            table = [line.split() for line in f]
    except OSError:
        return None
    relative = parent_path(name)
    v1 = [(fields[1], fields[3].split(",")) for fields in table if len(fields) > 3 and fields[2] == "cgroup"]
    memory = next((point for point, options in v1 if "memory" in options), None)
    plan: dict[str, Any] = {"relative": relative, "bytes": memory_mb * 1024 * 1024}
    if memory is not None:  # the engine makes the cgroup in every hierarchy, the v2 one of a hybrid host too
        roots = [fields[1] for fields in table if len(fields) > 2 and fields[2] in ("cgroup", "cgroup2")]
        return {**plan, "version": 1, "memory": memory + relative, "roots": roots}
    unified = next((fields[1] for fields in table if len(fields) > 2 and fields[2] == "cgroup2"), None)
    if unified is None:
        return None
    return {**plan, "version": 2, "memory": unified + relative, "roots": [unified]}


def parent_path(name: str) -> str:
    """The ``--cgroup-parent`` of the container named ``name``."""
    return f"/{CONTAINERS_CGROUP}/{name}"


def run_in(plan: dict[str, Any], argv: list[str], env: dict[str, str], record_path: str) -> NoReturn:
    """Make the cgroup with its limit, watch it for OOM kills, start the engine's client
    as a child (in this process group, so a stop's or a suspension's signals reach it;
    this process outlives them), wait for it, record the OOM kills at ``record_path``,
    remove the cgroup, and end as the client ended (its status, or killed by its signal)."""
    for sig in _OUTLIVED:
        signal.signal(sig, _ignore)  # a handler, not SIG_IGN: the child gets the default back
    try:
        watch = make(plan)
    except OSError as exc:
        print(f"trainyard: cannot make the container's memory cgroup {plan['memory']}: {exc}", flush=True)
        os._exit(CANNOT_RUN)
    pid = os.posix_spawn(argv[0], argv, env)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    _write_json(record_path, {"oom_kills": oom_kills(plan, watch), "memory_bytes": plan["bytes"]})
    remove(plan)
    if os.WIFSIGNALED(status):
        killed_by = os.WTERMSIG(status)  # end as the client did: the waiter reads the signal
        signal.signal(killed_by, signal.SIG_DFL)
        os.kill(os.getpid(), killed_by)
    os._exit(os.waitstatus_to_exitcode(status))


def _ignore(signum: int, frame: object) -> None:
    pass


def make(plan: dict[str, Any]) -> int | None:
    """:func:`_make`, again when another task's cleanup removed a level above it (an
    empty ``trainyard`` or ``containers`` folder) while it was being made."""
    for attempt in range(5):
        try:
            return _make(plan)
        except FileNotFoundError:
            if attempt == 4:
                raise
    raise AssertionError("unreachable")


def _make(plan: dict[str, Any]) -> int | None:
    """Make the cgroup with its limit; on v1, an eventfd the kernel counts its OOMs on."""
    memory = plan["memory"]
    if plan["version"] == 2:
        root = plan["roots"][0]
        current = root
        for part in plan["relative"].strip("/").split("/"):
            _write(current, "cgroup.subtree_control", "+memory")  # hand the controller down
            current = os.path.join(current, part)
            os.makedirs(current, exist_ok=True)
        _write(memory, "memory.max", str(plan["bytes"]))
        if os.path.exists(os.path.join(memory, "memory.swap.max")):
            _write(memory, "memory.swap.max", "0")
        return None
    os.makedirs(memory, exist_ok=True)
    _write(memory, "memory.limit_in_bytes", str(plan["bytes"]))
    if os.path.exists(os.path.join(memory, "memory.memsw.limit_in_bytes")):
        _write(memory, "memory.memsw.limit_in_bytes", str(plan["bytes"]))  # no way around it through swap
    event = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
    control = os.open(os.path.join(memory, "memory.oom_control"), os.O_RDONLY | os.O_CLOEXEC)
    _write(memory, "cgroup.event_control", f"{event} {control}")
    return event


def oom_kills(plan: dict[str, Any], watch: int | None) -> int:
    """The OOM kills in the cgroup so far (``watch``: :func:`make`'s eventfd, on v1)."""
    if watch is not None:
        try:
            return os.eventfd_read(watch)
        except BlockingIOError:
            return 0
    try:
        with open(os.path.join(plan["memory"], "memory.events")) as f:
            fields = dict(line.split() for line in f if len(line.split()) == 2)
        return int(fields.get("oom_kill", 0))
    except (OSError, ValueError):
        return 0


def remove(plan: dict[str, Any], wait_seconds: float = _CGROUP_WAIT_SECONDS) -> None:
    """Remove the cgroup (and what the engine made inside it, for its monitor) in every
    hierarchy. The monitor exits just after the client: wait a while for its cgroup to
    empty; one still in use after that stays."""
    deadline = time.monotonic() + wait_seconds
    while True:
        left = False
        for root in plan["roots"]:
            for path, _, _ in os.walk(root + plan["relative"], topdown=False):  # the deepest first
                try:
                    os.rmdir(path)
                except FileNotFoundError:
                    pass
                except OSError:
                    left = True
        if not left or time.monotonic() >= deadline:
            return
        time.sleep(0.02)


def node_plan(task_dir: str, mounts: str = "/proc/self/mounts") -> tuple[dict[str, Any] | None, str]:
    """The plan of the cgroup of a Slurm task's container on this node, or why it has
    none (``check``): the memory controller is missing, or this account may not write it."""
    try:
        with open(os.path.join(task_dir, CGROUP_INPUT)) as f:
            wanted = json.load(f)
        name, memory_mb = str(wanted["name"]), int(wanted["memory_mb"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, f"cannot read {CGROUP_INPUT}: {exc}"
    if not hasattr(os, "eventfd"):
        return None, f"{sys.executable} is older than Python 3.10"
    plan = memory_cgroup(name, memory_mb, mounts)
    if plan is None:
        return None, "no cgroup memory controller is mounted here"
    top = plan["memory"][: -len(plan["relative"])]
    if not os.access(top, os.W_OK):
        return None, f"cannot create cgroups in {top} (the job's account is not root)"
    return plan, ""


def main(argv: list[str]) -> int:
    """``check TASK_DIR`` or ``run TASK_DIR ARGV...`` (the module docstring)."""
    if len(argv) < 3 or argv[1] not in ("check", "run") or (argv[1] == "run" and len(argv) < 4):
        print(f"usage: {argv[0]} check TASK_DIR | run TASK_DIR ARGV...", file=sys.stderr)
        return 2
    task_dir = argv[2]
    plan, why = node_plan(task_dir)
    if argv[1] == "check":
        if plan is None:
            print(f"trainyard: the container's memory limit is the engine's on this node ({why}): "
                  "a kill at the limit is reported as a plain SIGKILL", flush=True)
        return 0 if plan is not None else 1
    if plan is None:
        print(f"trainyard: no memory cgroup for the container: {why}", flush=True)
        return CANNOT_RUN
    run_in(plan, argv[3:], dict(os.environ), os.path.join(task_dir, CONTAINER_RECORD))


def _write_json(path: str, data: dict[str, Any]) -> None:
    """Replace ``path`` atomically: a reader sees the whole record or none."""
    staging = f"{path}.{os.getpid()}.tmp"
    with open(staging, "w") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(staging, path)


def _write(directory: str, name: str, value: str) -> None:
    fd = os.open(os.path.join(directory, name), os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
