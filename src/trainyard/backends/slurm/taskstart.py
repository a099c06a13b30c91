"""A sandboxed Slurm task's start on its node: ``python3 -I -S task-start.py TASK_DIR``.

Run by the task runner (``runners.TASK_RUNNER``), as root, in the task's Slurm step, when
the backend runs tasks as their owners' accounts (``SlurmBackend(accounts=..., sandbox=...)``).
The backend wrote ``TASK_DIR/sandbox.json`` (root's, 0600): the bubblewrap command line
(``local.sandbox.sandbox_argv``, the local backend's, built once for both), the storages
to open for its ``--bind-fd`` and the fixed environment it runs with. Here, on the node:

1. the task's environment is its ``env`` file (NUL-separated ``NAME=value``, never
   evaluated) plus what only the step knows: Slurm's variables and the GPU pinning the
   runner passes in this process's own environment, and a GPU share's MPS client variables
   (``mps.env``, root's, from ``mps-step.py``); it goes to ``TASK_DIR/spec.json``
   (root's, 0600), which the task's start inside the sandbox (``sandboxjoin --stop``)
   reads after it has dropped to the account, as on the local backend;
2. each storage is opened without following a link (``sandboxjoin.open_mount_fds``);
3. node-local folders the sandbox hides are made where missing (``node_dirs``: the MPS
   daemons' root, ``slurm/shares``);
4. the command line is exec'd in this process (the runner's task: its process group, its
   status), with ``launch_env``: nothing of the job's reaches what runs as root.

Before all that, the task's account (``plan["account"]``) must be on this node with the
uid and gid the server gave the task: an account Trainyard made (its GECOS marker) is made
here too, with those ids (``groupadd``/``useradd``: the same uid on every node, without a
directory service); a site's account that is missing or numbered otherwise is the node's
fault, not the task's: ``TASK_DIR/fault`` says so, and the attempt is retried elsewhere.

Stdlib only, with ``sandboxjoin.py`` beside it (both fixed text the backend installs).
"""

from __future__ import annotations

import grp
import importlib
import json
import os
import pwd
import re
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable

# What the step adds to the task's env file: Slurm's own variables (SLURM_*, and PMI_*/PMIX_*
# for MPI launchers) and the runner's GPU pinning, which comes last.
STEP_PREFIXES = ("SLURM_", "SLURMD_", "PMI_", "PMIX_")
PINNING = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")


def task_env(env_file: str, step: dict[str, str]) -> dict[str, str]:
    with open(env_file, "rb") as f:
        pairs = [item.decode("utf-8", "surrogateescape") for item in f.read().split(b"\0") if item]
    env = dict(pair.split("=", 1) for pair in pairs if "=" in pair)
    env.update({k: v for k, v in step.items() if k.startswith(STEP_PREFIXES)})
    env.update({k: step.get(k, "") for k in PINNING})
    env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    return env


# What ``mps-step.py`` (root's, before this) hands a task with part of a GPU: its MPS client's
# variables and its device by UUID, which come after the pinning (``slurm/mpsstep``).
SHARE_VARIABLES = ("CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
                   "CUDA_VISIBLE_DEVICES")


def share_env(path: str) -> dict[str, str]:
    """The client's variables of a task's GPU share ({} where it has none, or it is not enforced)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}
    with os.fdopen(fd, "rb") as f:
        pairs = [item.decode() for item in f.read().split(b"\0") if item]
    return {k: v for k, _, v in (pair.partition("=") for pair in pairs) if k in SHARE_VARIABLES}


def write_root_only(path: str, data: bytes, mode: int = 0o600) -> None:
    """``data`` in a new file at ``path`` (replacing it at once), root's, of ``mode``."""
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def make_node_dir(path: str) -> None:
    """A node-local folder the sandbox hides (root's, 0711), made with its parents where missing,
    each 0711 whatever the step's umask (Slurm gives a task the submitter's): the users' MPS
    daemons must pass through it to their own folders."""
    missing, folder = [], path
    while not os.path.lexists(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o711)
        except FileExistsError:
            continue
        os.chmod(folder, 0o711)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0:
        raise ValueError(f"{path} is not a folder of root's")


_HOST_NAME = re.compile(r"trainyard-worker-[0-9]{1,9}")
_ADDRESS = re.compile(r"[0-9A-Za-z.:-]{1,253}")


def write_hosts(path: str, names: dict[str, str]) -> None:
    """The node's ``/etc/hosts`` and a line per name (an elastic job's workers': names and
    addresses the server wrote, checked again here), for the sandbox to bind over it:
    readable by the task's account, written by root alone."""
    try:
        with open("/etc/hosts", "rb") as f:
            base = f.read()
    except FileNotFoundError:
        base = b""
    lines = []
    for name, address in names.items():
        if not (_HOST_NAME.fullmatch(name) and _ADDRESS.fullmatch(address)):
            raise ValueError(f"not a worker's host name and address: {name!r} {address!r}")
        lines.append(f"{address}\t{name}\n")
    data = base + (b"" if not base or base.endswith(b"\n") else b"\n") + "".join(lines).encode()
    write_root_only(path, data, 0o644)


class NodeFault(Exception):
    """This node cannot run the task (not the task's doing): a platform fault."""


def ensure_account(account: dict[str, object]) -> None:
    """The task's account is on this node with the server's ids; made here when Trainyard
    made it (``made``); NodeFault otherwise."""
    name, uid, gid = str(account["name"]), int(str(account["uid"])), int(str(account["gid"]))
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    made = bool(account.get("made"))
    entry = _account(name)
    if entry is None and made:
        _own_group(name, gid, node)  # before anything is made: never into another's group
        entry = _make_account(name, uid, gid, str(account["marker"]), str(account["home"]))
    if entry is None:
        raise NodeFault(f"no OS account {name!r} on node {node} (the server runs this user's tasks as uid {uid}):"
                        f" the site's accounts must exist on every node with the same uid (LDAP/sssd, or"
                        f" useradd --uid {uid})")
    if (entry.pw_uid, entry.pw_gid) != (uid, gid):
        raise NodeFault(f"the OS account {name!r} is uid {entry.pw_uid} gid {entry.pw_gid} on node {node}, but"
                        f" {uid} {gid} on the server: an account must have the same ids on every node")
    if made:
        _own_group(name, gid, node)


def _account(name: str) -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        return None


def _own_group(name: str, gid: int, node: str) -> None:
    """An account Trainyard made has a group of its own, by its name (``useradd
    --user-group`` on the server): the gid, where this node has it, must be that group,
    never one the node gave another (docker, a site's group)."""
    try:
        group = grp.getgrgid(gid).gr_name
    except KeyError:
        return
    if group != name:
        raise NodeFault(f"gid {gid} of the OS account {name!r} is the group {group!r} on node {node}: Trainyard's"
                        " accounts need the same uid and gid on every node; free that gid there, or map this"
                        " user to a site account (task_account_map)")


def _make_account(name: str, uid: int, gid: int, marker: str, home: str) -> pwd.struct_passwd | None:
    """Make the account (and its group) with these ids; one that another task's start made
    meanwhile (two tasks of a new user on one node) is taken as it is."""
    try:
        grp.getgrgid(gid)
    except KeyError:
        _run(["groupadd", "--system", "--gid", str(gid), name], done=lambda: _has_group(gid, name))
    shell = "/usr/sbin/nologin" if os.path.exists("/usr/sbin/nologin") else "/bin/false"
    _run(["useradd", "--system", "--uid", str(uid), "--gid", str(gid), "--no-create-home", "--home-dir", home,
          "--shell", shell, "--comment", marker, name],
         done=lambda: (entry := _account(name)) is not None and (entry.pw_uid, entry.pw_gid) == (uid, gid))
    return _account(name)


def _has_group(gid: int, name: str) -> bool:
    try:
        return grp.getgrgid(gid).gr_name == name
    except KeyError:
        return False


def _run(argv: list[str], done: Callable[[], bool], tries: int = 20) -> None:
    """Run ``argv`` (root's groupadd/useradd) until it worked or ``done`` says what it
    makes is there (made by a concurrent start; or /etc/passwd was locked meanwhile)."""
    for _ in range(tries):
        finished = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        if finished.returncode == 0 or done():
            return
        time.sleep(0.1)
    raise NodeFault(f"{argv[0]} for the task's account failed on this node:"
                    f" {finished.stderr.strip() or finished.returncode}")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: task-start.py TASK_DIR", file=sys.stderr)
        return 2
    task_dir = argv[1]
    try:
        with open(os.path.join(task_dir, "sandbox.json"), encoding="utf-8") as f:
            plan = json.load(f)
        if "account" in plan:
            ensure_account(plan["account"])
        env = task_env(os.path.join(task_dir, "env"), dict(os.environ))
        env.update(share_env(os.path.join(task_dir, "mps.env")))
        write_root_only(os.path.join(task_dir, "spec.json"), json.dumps({"env": env}).encode())
        for folder in plan.get("node_dirs", ()):
            make_node_dir(folder)
        if plan.get("hosts"):
            write_hosts(os.path.join(task_dir, "hosts"), plan["hosts"])
        # sandboxjoin.py lies beside this file on the nodes (``-I`` puts no folder on the path).
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        importlib.import_module("sandboxjoin").open_mount_fds(plan["mount_fds"])
        argv = [str(a) for a in plan["argv"]]
        os.execve(argv[0], argv, {str(k): str(v) for k, v in plan["launch_env"].items()})
    except NodeFault as fault:
        print(f"trainyard: {fault}; the task was not started", file=sys.stderr)
        write_root_only(os.path.join(task_dir, "fault"), f"{fault}; the task was not started\n".encode())
        return 0
    except (OSError, KeyError, ValueError) as exc:
        print(f"trainyard: cannot start the task in its sandbox: {exc}", file=sys.stderr)
        return 126
    return 127  # not reached: execve returns only by raising


if __name__ == "__main__":
    sys.exit(main(sys.argv))
