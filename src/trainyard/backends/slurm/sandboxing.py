"""A Slurm task under per-user accounts, as the server prepares it (``SlurmBackend._submit``):
its account and its own folders beside its root-only directory, the clean environment it
starts from, and ``sandbox.json``, the bubblewrap command line that ``taskstart.py`` runs on
its node (built by the local backend's ``sandbox.sandbox_argv``, one builder for both
backends), with ``sandbox.join`` for ``yard exec``. Also what the sandbox hides of Slurm
itself: munged's socket folder; and what a job can reach on this backend, said at ``yard up``
(``isolation_summary``)."""

from __future__ import annotations

import json
import os
import pwd
from collections.abc import Mapping, Sequence
from pathlib import Path

from trainyard.backends import taskuser
from trainyard.backends.base import Mount, TaskLaunch
from trainyard.backends.environment import base_environment
from trainyard.backends.sandbox import LAUNCH_ENV, Identity, Sandbox, StorageMount, enter_argv, mount_fds, sandbox_argv
from trainyard.backends.slurm import submission
from trainyard.backends.slurm.commands import SlurmCommands, munge_socket
from trainyard.backends.taskaccounts import ACCOUNT_MARKER, NO_HOME, TaskAccounts
from trainyard.core.names import USER_NAME

HOSTS_FILE = "hosts"  # in the task's directory, made by task-start.py on the node (``write_sandbox_plan``)


def task_account(accounts: TaskAccounts | None, task: TaskLaunch, task_dir: Path,
                 job_dir: Path) -> submission.TaskAccount | None:
    """With per-user accounts: the task's account and its own folders, made beside its
    directory (root's, 0700; the attempt's 0711), and the job's directory made the
    account's (0700). None: the task runs as the server's account."""
    if accounts is None:
        return None
    user = accounts.account_for(task.user)
    attempt = task_dir.parent
    for folder in (attempt.parent, attempt):
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, taskuser.WORK_ROOT_MODE)
    task_dir.mkdir(exist_ok=True)
    os.chmod(task_dir, 0o700)
    taskuser.make_owned_dir(job_dir, user)
    name = task_dir.name
    account = submission.TaskAccount(
        user=user, work=taskuser.make_owned_dir(attempt / f"{name}{submission.WORK_SUFFIX}", user),
        script=attempt / f"{name}{submission.SCRIPT_SUFFIX}",
        secrets=attempt / f"{name}{submission.SECRETS_SUFFIX}",
        suspend_dir=taskuser.make_passable_dir(attempt / f"{name}{submission.SUSPEND_SUFFIX}", user))
    taskuser.write_user_script(account.script, task.script, user)
    return account


def account_env(account: submission.TaskAccount, site_env: dict[str, str]) -> dict[str, str]:
    """The clean environment a task starts from, as its account: its HOME (the work
    dir for accounts without one), USER and LOGNAME, and the site's variables."""
    home = str(account.work) if account.user.home in ("", NO_HOME) else account.user.home
    return {**base_environment(home, account.user.name), **site_env}


def write_sandbox_plan(sandbox: Sandbox | None, starter: tuple[str, ...], task: TaskLaunch, task_dir: Path,
                       job_dir: Path, account: submission.TaskAccount, task_python: Path,
                       environments_root: Path, hosts: Mapping[str, str] | None = None,
                       datasets: tuple[Sequence[Mount], Path | None] = ((), None),
                       shared: Path | None = None, node_dirs: Sequence[Path] = ()) -> None:
    """``sandbox.json`` (what ``task-start.py`` runs on the node: the local backend's
    sandbox command line) and ``sandbox.join`` (how ``yard exec`` joins it). ``hosts``:
    names the task must resolve to addresses (``wiring.agent_names``), which
    ``task-start.py`` adds to a copy of the node's ``/etc/hosts`` bound over it. ``datasets``:
    the read-only mounts of the task's datasets' entries, and its node's cache, which the
    sandbox hides but for them (``slurm.datasets``). ``shared``: the pipe directory of the
    owner's MPS daemon for a task with part of a GPU (``slurm.shares``), made on the node
    before the task starts, bound writable as on the local backend. ``node_dirs``: node-local
    folders the sandbox hides (the MPS daemons' root), which ``task-start.py`` makes (root's,
    0711) where they are missing: bubblewrap cannot mount over a path that does not exist."""
    assert sandbox is not None
    identity = Identity(*account.ids)
    attempt = task_dir.parent
    shm = taskuser.make_owned_dir(attempt / ".shm", account.user)
    mounts = [StorageMount(Path(m.root or m.source), m.sub_path, Path(m.target), m.read_only)
              for m in (*task.mounts, *datasets[0])]
    bound = [account.secrets, account.script, account.suspend_dir, task_python]
    writable = [job_dir, *([shared] if shared is not None else [])]
    if environments_root.is_dir():
        bound.append(environments_root)
        if USER_NAME.fullmatch(task.user):
            # Where the owner's environments are built (``yard env create`` runs as their
            # job): theirs to write, everyone's to read, as on the local backend.
            writable.append(taskuser.make_readable_owned_dir(environments_root / task.user, account.user))
    spec_file = task_dir / "spec.json"
    argv = sandbox_argv(
        sandbox, ["/bin/bash", "--noprofile", "--norc", str(account.script)], hidden=(),
        work_dir=account.work, shm_dir=shm, stop_file=task_dir / "relay.stop", spec_file=spec_file,
        bound=bound, writable=writable, mounts=mounts,
        storage_paths=[*(Path(p) for p in task.storage_paths), *([datasets[1]] if datasets[1] else [])],
        identity=identity, starter=starter, hosts_file=task_dir / HOSTS_FILE if hosts else None)
    plan = {"argv": argv, "mount_fds": mount_fds(mounts), "launch_env": dict(LAUNCH_ENV), "hosts": dict(hosts or {}),
            "node_dirs": [str(path) for path in node_dirs],
            # task-start.py checks (or, for an account Trainyard made, makes) it on the node.
            "account": {"name": account.user.name, "uid": account.user.uid, "gid": account.user.gid,
                        "made": made_by_trainyard(account.user.name), "marker": ACCOUNT_MARKER,
                        "home": NO_HOME}}
    submission.write_private(task_dir / "sandbox.json", json.dumps(plan).encode())
    join = enter_argv(starter, spec_file, str(account.work), ["true"], bwrap=None, identity=identity,
                      block_userns=sandbox.userns_filter is not None)
    join = join[:join.index("--")]  # exec-runner.sh adds --sandbox PID:START -- COMMAND
    submission.write_private(task_dir / "sandbox.join", b"".join(a.encode() + b"\0" for a in join))


def made_by_trainyard(account: str) -> bool:
    """Whether Trainyard made the OS account (its GECOS marker), so that a node without it
    may make it with the same ids; a site's account must be there already."""
    try:
        return pwd.getpwnam(account).pw_gecos == ACCOUNT_MARKER
    except KeyError:
        return False


def munge_dir(commands: SlurmCommands) -> list[Path]:
    """The folder of munged's socket, to hide from tasks (through it a task could have
    Slurm run jobs as its account, outside the sandbox); none where it is a folder that
    tasks need (``/run`` itself) or does not exist here."""
    folder = Path(os.path.realpath(Path(munge_socket(commands.slurm_conf)).parent))
    return [folder] if len(folder.parts) > 2 and folder.is_dir() else []


def isolation_summary(state_dir: Path, user: str, *, isolated: bool = False, why_not: str = "") -> str:
    """What a job can reach on this backend, said once at ``yard up``: with per-user
    accounts and the sandbox (``isolated``), as on the local backend; else a warning, as the
    local backend's weak modes are (``why_not``: why tasks are not isolated)."""
    if isolated:
        return (
            "task isolation on Slurm: each Trainyard user's tasks run as their own OS account on the nodes"
            " (the same uid on every node), in a bubblewrap sandbox (private /proc, /tmp and /dev/shm;"
            f" {state_dir}, the server's home and other tasks' files hidden; storages at their mountPath,"
            " read-only enforced; secrets as files only the task's account can read). See docs/slurm.md."
        )
    who = "root" if user == "root" else f"the server's own OS account {user!r}"
    return (
        f"task isolation on Slurm is weak: every task runs as {who} on the nodes, without a sandbox"
        f"{f' ({why_not})' if why_not else ''}: any job can read every other job's files, secrets and job"
        f" directory under {state_dir}, and their command lines; storages are bound without their mountPath"
        " and read-only is not enforced. Run `yard up` as root with task_accounts=auto and bubblewrap on"
        " the nodes. See docs/slurm.md (Limits) and docs/security.md."
    )
