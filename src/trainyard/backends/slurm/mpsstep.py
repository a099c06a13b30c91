"""A compute node's side of enforced GPU shares on Slurm (issue 36), installed as
``<state_dir>/bin/mps-step.py`` (with a copy of ``backends/mps.py`` beside it) and run as
root by the node's ``python3 -I -S``, from the task runner (``runners.TASK_RUNNER``):

    mps-step.py acquire TASK_DIR RUNNER_PID   before a task with part of a GPU starts
    mps-step.py release TASK_DIR RUNNER_PID   after it has ended

The server wrote ``TASK_DIR/mps.json`` (root's, 0600; ``SlurmBackend``): the node and the
device (Slurm's GPU id, the device file's minor number), the share in thousandths, the
owner's account and Trainyard user, the folder of the daemons. Here, on the node, as on
the local backend (``backends/mps``), a daemon of the owner's, as their account, holds
their tasks to their shares; but one per user **per device** (``<root>/<node>/gpu<N>/<uid>-<user>``),
started with ``CUDA_VISIBLE_DEVICES`` set to that device's UUID. Why (``docs/architecture.md``):

- the daemon must outlive the step that starts it, serve the user's later steps and quit
  after the last: so it runs *outside* the step's cgroups (``escape_cgroups``: this process
  moves itself into ``trainyard-mps`` at the top of each hierarchy before it starts the
  daemon; a daemon in the step's cgroup dies with the step under proctrack/cgroup, and
  counts against its ``--mem``);
- outside the step, Slurm's ``ConstrainDevices`` no longer limits it, and an MPS client's
  work runs in the server, which the daemon starts: a daemon that saw every device would
  let a task reach GPUs it does not hold. A daemon of one device, named by its UUID, lets
  its clients reach that device alone (the one its owner holds a share of).

The device's UUID and memory come from the driver's ``nvidia-smi -q -x`` (beside the
control program, else on the daemon's PATH): Slurm knows neither. The client's variables
(its pipe directory, its limit, the device by UUID) go to ``TASK_DIR/mps.env`` (root's),
which ``task-start.py`` puts after the step's pinning; the task's sandbox binds its own
pipe directory writable and hides the rest (``sandboxing``). What did not work is said in
the task's log and in ``TASK_DIR/mps.note`` (its status's message): the task then runs
as before, its share not enforced.

A step killed before its runner could ``release`` (SIGKILL, a node's slurmd lost) must not
leave the daemon for ever: with the daemon, ``acquire`` starts a *keeper* (root, outside
the step too), which looks every ``KEEP_SECONDS`` under the user's lock: once no live task
holds the daemon (a holder is the runner's pid and start time), it quits it and ends.
The next task's runner that finds a stale daemon (its holders gone) reuses it, its limits
set again to what the live holders hold.

Stdlib only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

USAGE = "usage: mps-step.py acquire|release TASK_DIR RUNNER_PID"
PLAN = "mps.json"  # the server's plan, in the task's directory
NODE_PLAN = "mps.node.json"  # the plan as acquired on the node (its device's UUID), for release
ENV = "mps.env"  # the client's variables, NUL-separated NAME=value (task-start.py reads it)
NOTE = "mps.note"  # why the task's share is not enforced (one line)
KEEPER = "keeper"  # in the user's folder: the keeper's pid and start time (root's)
KEEP_SECONDS = 2.0
CGROUP = "trainyard-mps"  # at the top of each cgroup hierarchy: daemons and keepers
_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ShareError(Exception):
    """This node cannot enforce the task's share (said; the task runs as before)."""


def _mps() -> Any:
    import importlib

    # The copy beside this file (``-I`` puts no folder on the path: ``main`` does).
    return importlib.import_module("mps")


def read_plan(task_dir: str) -> dict[str, Any]:
    with open(os.path.join(task_dir, PLAN), encoding="utf-8") as f:
        plan: dict[str, Any] = json.load(f)
    node = os.environ.get("SLURMD_NODENAME")
    if node and node != plan["node"]:
        raise ValueError(f"the GPU share's plan is for node {plan['node']}, and this is node {node}")
    return plan


def device(smi: str, minor: int) -> tuple[str, int]:
    """The UUID and memory (MiB) of the device whose file is ``/dev/nvidia<minor>``, as the
    driver's ``nvidia-smi -q -x`` says."""
    done = subprocess.run([smi, "-q", "-x"], capture_output=True, timeout=60, check=False, env={"PATH": _PATH},
                          cwd="/")
    if done.returncode != 0:
        raise ShareError(f"{smi} -q -x exited with {done.returncode}")
    for gpu in ElementTree.fromstring(done.stdout).iter("gpu"):
        if (gpu.findtext("minor_number") or "").strip() == str(minor):
            uuid = (gpu.findtext("uuid") or "").strip()
            total = (gpu.findtext("fb_memory_usage/total") or "").split()
            if uuid.startswith("GPU-") and total and total[0].isdigit():
                return uuid, int(total[0])
    raise ShareError(f"nvidia-smi lists no device with minor number {minor}")


def node_plan(plan: dict[str, Any]) -> dict[str, Any]:
    """``backends/mps``'s plan for the task on this node: its step's device, found here."""
    step = os.environ.get("SLURM_STEP_GPUS", "")
    if step != str(plan["gpu"]):
        raise ShareError(f"its step holds GPU {step or 'none'}, not GPU {plan['gpu']} that its share is of")
    control = plan.get("control") or shutil.which("nvidia-cuda-mps-control", path=_PATH)
    if not control or not os.access(control, os.X_OK):
        raise ShareError("nvidia-cuda-mps-control is not installed on this node")
    beside = os.path.join(os.path.dirname(control), "nvidia-smi")
    smi = beside if os.access(beside, os.X_OK) else shutil.which("nvidia-smi", path=_PATH)
    if smi is None:
        raise ShareError("nvidia-smi is not installed on this node")
    uuid, total = device(smi, int(plan["gpu"]))
    mb = _mps().share_mb(int(plan["milli"]), total)
    # The daemon sees its one device as 0; the client names it by UUID.
    return {**{k: plan[k] for k in ("base", "root", "key", "uid", "gid", "groups", "holder", "threads")},
            "control": control, "clients": [[uuid, mb]], "devices": [[0, mb]], "visible": uuid}


def acquire(task_dir: str, runner: int) -> int:
    """Hold the owner's daemon for the task (``runner``: its task runner, which lives as long
    as the task); the client's variables in ``ENV``, else why not in ``NOTE``."""
    mps = _mps()
    plan = read_plan(task_dir)
    # Root's folders down to the user's (node-local; 0711), then theirs: its pipe directory
    # exists for the sandbox to bind, enforced or not.
    if plan["root"] != os.path.join(plan["base"], plan["node"], f"gpu{int(plan['gpu'])}"):
        raise ValueError(f"not a folder of the node's MPS daemons: {plan['root']!r}")
    # The base's missing parents too (``DEFAULT_ROOT`` under /run: gone at each boot; the
    # server made its own copy only): else a node's first shared task ran unenforced, and its
    # sandbox, which binds the pipe directory, could not start at all. Each ROOT_MODE whatever
    # the step's umask (Slurm gives a task the submitter's): the daemon, as the user, must pass.
    missing, folder = [], os.path.dirname(plan["base"])
    while not os.path.lexists(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    for folder in (*reversed(missing), plan["base"], os.path.dirname(plan["root"])):
        mps.make_root(folder)
    mps.prepare(plan)
    try:
        share = node_plan(plan)
    except (ShareError, OSError, ValueError, ElementTree.ParseError, subprocess.SubprocessError) as exc:
        return _note(task_dir, plan, [f"{mps.NOT_ENFORCED} on this node: {exc}"])
    moved = escape_cgroups()  # before the daemon and its keeper start: they must outlive the step
    notes = mps.acquire(share, runner)
    # Whatever acquire held (a daemon that started, then failed its limits, too): released after
    # the task, and watched by the keeper should the task's runner not live to release it.
    _write(os.path.join(task_dir, NODE_PLAN), json.dumps(share).encode())
    keep_started(share)
    if notes:
        return _note(task_dir, plan, notes)
    env = {**mps.client_env(share), "CUDA_VISIBLE_DEVICES": share["visible"]}
    _write(os.path.join(task_dir, ENV), b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))
    if moved:
        _say(f"trainyard: the MPS daemon runs inside the task's step ({moved}): it ends with the step")
    return 0


def release(task_dir: str, runner: int) -> int:
    """The task has ended: it no longer holds its owner's daemon (quit after the last)."""
    try:
        with open(os.path.join(task_dir, NODE_PLAN), encoding="utf-8") as f:
            share = json.load(f)
    except FileNotFoundError:
        return 0  # not enforced: nothing held
    for note in _mps().release(share):
        _say(f"trainyard: {note}")
    return 0


def escape_cgroups(mounts: str = "/proc/self/mounts") -> str:
    """Move this process into ``CGROUP`` at the top of each cgroup hierarchy (v1 and v2), out
    of the step's; what could not be moved ("" when all was)."""
    problems = []
    with open(mounts, encoding="utf-8") as f:
        table = [line.split() for line in f]
    for fields in table:
        if len(fields) < 4 or fields[2] not in ("cgroup", "cgroup2"):
            continue
        top = fields[1].replace("\\040", " ")
        target = os.path.join(top, CGROUP)
        try:
            try:
                os.mkdir(target, 0o755)
            except FileExistsError:
                pass
            if "cpuset" in fields[3].split(","):  # a new v1 cpuset has no CPUs or memory nodes to run on
                for name in ("cpuset.cpus", "cpuset.mems"):
                    if not _read(os.path.join(target, name)):
                        _put(os.path.join(target, name), _read(os.path.join(top, name)))
            _put(os.path.join(target, "cgroup.procs"), str(os.getpid()))
        except OSError as exc:
            problems.append(f"{top}: {exc.strerror or exc}")
    return "; ".join(problems)


def keep_started(share: dict[str, Any]) -> None:
    """A keeper for the user's daemon runs (started unless one lives): see the module's docstring."""
    mps = _mps()
    record = os.path.join(mps.user_dir(share), KEEPER)
    with mps.Locked(share) as lock:
        try:
            with open(record, encoding="utf-8") as f:
                known = json.load(f)
            if mps.start_time(int(known["pid"])) == known["start"] and known["start"]:
                return
        except (OSError, ValueError, KeyError, TypeError):
            pass
        ready_r, ready_w = os.pipe()
        child = os.fork()
        if child == 0:
            try:
                os.chdir("/")  # not the task's directory, on the shared filesystem, for as long as it keeps
                os.close(lock.fd)  # the lock is the open file's: the keeper must not keep it
                os.close(ready_r)
                os.setsid()
                if os.fork() == 0:
                    _keeper(share, record, ready_w)
                os._exit(0)
            except BaseException:  # noqa: BLE001 - a fork of the step must never return into it
                os._exit(1)
        os.close(ready_w)
        os.waitpid(child, 0)
        os.read(ready_r, 2)  # the keeper wrote its record (or died): no second one starts meanwhile
        os.close(ready_r)


def _keeper(share: dict[str, Any], record: str, ready: int) -> None:
    mps = _mps()
    try:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, ready)
        os.closerange(ready + 1, 1 << 16)
        _write(record, json.dumps({"pid": os.getpid(), "start": mps.start_time(os.getpid())}).encode())
        os.write(ready, b"up")
        os.close(ready)
        while True:
            time.sleep(KEEP_SECONDS)
            with mps.Locked(share):
                mps.cap_logs(share)  # the daemon logs each command a task sends it, outside any limit
                if mps.live_holders(share):
                    continue
                # Its last task ended without releasing it (a killed step), or released it.
                if mps._daemon_alive(share) or mps._daemon_processes(share):
                    mps.end(share)
                else:
                    mps.clear_pipe_dir(share)  # what its tasks left there (end does it too)
                os.unlink(record)
                break
    except BaseException:  # noqa: BLE001 - the keeper's end, whatever happened
        pass
    os._exit(0)


def _note(task_dir: str, plan: dict[str, Any], notes: list[str]) -> int:
    line = " ".join("; ".join(notes).split())[:1000]
    _say(f"trainyard: GPU share of {plan['key']}: {line}")
    _write(os.path.join(task_dir, NOTE), line.encode() + b"\n")
    return 0


def _write(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read().strip()


def _put(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    try:
        if len(argv) == 4 and argv[1] in ("acquire", "release") and argv[3].isdigit():
            return (acquire if argv[1] == "acquire" else release)(argv[2], int(argv[3]))
    except Exception as exc:  # noqa: BLE001 - said in the task's log; the task runs, its share unenforced
        _say(f"trainyard: the task's GPU share could not be enforced on this node: {exc}")
        return 0
    _say(USAGE)
    return 2


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the copy of backends/mps.py
    sys.exit(main(sys.argv))
