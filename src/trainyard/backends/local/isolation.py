"""How far the local backend's tasks are kept apart, decided once when the server starts.

Two independent parts (see docs/security.md):

- **accounts**: whose OS account a task runs as. ``per-user`` (each Trainyard user's own
  account, see ``taskaccounts``), ``shared`` (one account for every task: ``task_user``),
  or ``server`` (the account running ``yard up``). ``auto`` is ``per-user`` as root and
  ``server`` otherwise: only root can switch accounts.
- **sandbox**: a bubblewrap sandbox per task (see ``sandbox``). ``auto`` uses it where it
  works; ``bwrap`` insists; ``none`` turns it off.

The plan carries one line that says plainly what holds and what does not; the server
logs it once at start-up, as a warning whenever something is weaker than the best setup.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from trainyard.backends.sandbox import Sandbox, SandboxMode, find_sandbox
from trainyard.backends.taskaccounts import TaskAccounts

AccountsMode = Literal["auto", "per-user", "server"]
ACCOUNTS_MODES: tuple[AccountsMode, ...] = ("auto", "per-user", "server")
# Where work dirs go when tasks run under other accounts (unless task_work_dir says
# elsewhere): reachable by them, outside the server's private home. Either way in one
# folder per cluster id, so two servers never share one.
DEFAULT_WORK_ROOT = Path("/var/lib/trainyard/work")


@dataclass(frozen=True)
class TaskIsolation:
    """What the local backend is built with, and what that means for the admin."""

    accounts: TaskAccounts | None  # per-user accounts
    run_as: str | None  # one shared account
    sandbox: Sandbox | None
    work_dir_root: Path | None
    summary: str  # one paragraph: what is and is not isolated
    weak: bool  # True when the summary is a warning


def plan_isolation(
    *,
    accounts_mode: AccountsMode,
    task_user: str | None,
    sandbox_mode: SandboxMode,
    home: Path,
    cluster: str,
    as_root: bool,
    server_user: str,
    work_dir: Path | None = None,
    account_map: Mapping[str, str] | None = None,
    create_accounts: bool = True,
    allow_userns: bool = False,
) -> TaskIsolation:
    """Decide accounts, sandbox and work-dir root; ValueError for settings that cannot work."""
    if accounts_mode not in ACCOUNTS_MODES:
        raise ValueError(f"task_accounts must be one of {', '.join(ACCOUNTS_MODES)}; got {accounts_mode!r}")
    if task_user is not None and accounts_mode == "per-user":
        raise ValueError("task_user runs every task as one account; it cannot be combined with task_accounts=per-user")
    mode = "shared" if task_user is not None else accounts_mode
    if mode == "auto":
        mode = "per-user" if as_root else "server"
    if mode in ("per-user", "shared") and not as_root:
        raise ValueError(
            f"task accounts ({'task_user' if mode == 'shared' else 'task_accounts=per-user'}) need `yard up` to run"
            " as root, since only root can switch a task to another account"
        )
    if account_map and mode != "per-user":
        raise ValueError("task_account_map maps users to accounts, so it needs task_accounts=per-user (root)")
    if mode == "server" and as_root and sandbox_mode == "bwrap":
        raise ValueError("task_sandbox=bwrap cannot hold tasks that run as root; use task accounts")
    if mode == "server" and as_root:
        sandbox, no_sandbox = None, "a task running as root could undo one"
    else:
        sandbox, no_sandbox = find_sandbox(sandbox_mode, hidden=[home], as_root=as_root, allow_userns=allow_userns)
    accounts = TaskAccounts(account_map, create=create_accounts) if mode == "per-user" else None
    # Always one folder per cluster id, the admin's work_dir included: two servers given
    # the same one must not share (or adopt) each other's work dirs for job 1, 2...
    work_root = None
    if work_dir is not None or mode != "server":
        work_root = (DEFAULT_WORK_ROOT if work_dir is None else work_dir) / cluster
    summary, weak = _summary(mode, sandbox, no_sandbox, task_user, server_user, home)
    return TaskIsolation(accounts, task_user, sandbox, work_root, summary, weak)


def _user_namespaces(sandbox: Sandbox | None) -> str:
    if sandbox is None or sandbox.allow_userns:
        return "tasks may make user namespaces (task_user_namespaces)"
    if sandbox.user_namespace or sandbox.userns_filter is not None:
        return "no user namespaces in tasks"
    return "tasks may make user namespaces: no seccomp filter for this machine's architecture"


def _summary(
    mode: str, sandbox: Sandbox | None, no_sandbox: str, task_user: str | None, server_user: str, home: Path
) -> tuple[str, bool]:
    hidden = (
        f"in a bubblewrap sandbox (private /proc, /tmp and /dev/shm; {home}, the task state and other"
        f" tasks' work dirs hidden; {_user_namespaces(sandbox)})"
    )
    without = f"without a sandbox ({no_sandbox})"
    if mode == "per-user":
        if sandbox is not None:
            return f"task isolation: each Trainyard user's tasks run as their own OS account, {hidden}", False
        return (
            f"task isolation is partial: each Trainyard user's tasks run as their own OS account but {without}:"
            " files, environments and secrets are kept apart, but every task sees the command lines of all"
            " processes in /proc and shares /tmp and /dev/shm. Install bubblewrap to close that.",
            True,
        )
    if mode == "shared":
        if sandbox is not None:
            return (
                f"task isolation is partial: every task runs as the one OS account {task_user!r}, {hidden}; a file"
                f" a task leaves outside its sandbox's private dirs, anywhere {task_user!r} may write, can be read"
                " by other users' tasks. Per-user accounts (leave task_user unset) keep users fully apart.",
                True,
            )
        return (
            f"task isolation is weak: every task runs as the one OS account {task_user!r} {without}: any task can"
            " read other tasks' work dirs and secrets, and their environments and command lines in /proc."
            f" {home} stays out of reach. Leave task_user unset for per-user accounts.",
            True,
        )
    if sandbox is not None:
        return (
            f"task isolation is partial: `yard up` runs as {server_user!r}, not root, so every task runs as"
            f" {server_user!r} too, {hidden}. What {server_user!r} can read elsewhere (its home directory,"
            " for one) every task can read, and processes of the server's account outside Trainyard can read"
            " the tasks' files. Run `yard up` as root for per-user accounts.",
            True,
        )
    who = "root" if server_user == "root" else f"the server's own OS account {server_user!r}"
    return (
        f"tasks are NOT isolated: every task runs as {who} {without}: any job can read"
        f" {home} (the admin token, the database), every other job's files, secrets, environment and command"
        " line. Run `yard up` as root with task_accounts=auto, or install bubblewrap where unprivileged user"
        " namespaces are allowed.",
        True,
    )
