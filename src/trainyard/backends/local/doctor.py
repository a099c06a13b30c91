"""`yard doctor` on the server's own machine: what the local backend needs, and the task
accounts every backend maps Trainyard's users to (on Slurm the nodes must then agree).

The checks decide as ``yard up`` does (``isolation.plan_isolation``, ``TaskAccounts``,
``ContainerEngine.find``, NVML), but only look: no account is created, nothing is started.
"""

from __future__ import annotations

import getpass
import os
import pwd
from collections.abc import Sequence

from trainyard.backends.base import GpuInfo
from trainyard.backends.containers import ContainerEngine
from trainyard.backends.doctor import Account, Check, fail, ok, skip, warn
from trainyard.backends.gpushares import find_enforcement
from trainyard.backends.local.gpus import discover_nvidia_gpus
from trainyard.backends.sandbox import find_sandbox
from trainyard.backends.taskaccounts import ACCOUNT_MARKER, derived_account_name
from trainyard.backends.taskuser import TaskUser
from trainyard.core.settings import Settings


def per_user_accounts(settings: Settings, *, as_root: bool) -> bool:
    """Whether each Trainyard user's tasks run as their own account (as ``yard up`` decides)."""
    return settings.task_user is None and (
        settings.task_accounts == "per-user" or (settings.task_accounts == "auto" and as_root))


def check_server_account(settings: Settings, *, as_root: bool) -> Check:
    user = getpass.getuser()
    if as_root:
        return ok("server account", "root: tasks can run as their users' own accounts")
    return warn("server account", f"{user}, not root: every task runs as {user} too, so users' jobs are not kept "
                "apart", "run yard up (and yard doctor) as root")


def check_accounts(settings: Settings, users: Sequence[str] | None, *, as_root: bool,
                   cluster: bool) -> tuple[Check, list[Account]]:
    """Each Trainyard user's task account on this machine: the one ``task_account_map``
    names, else ``ty-<name>`` (made on first use where ``task_account_create`` lets it;
    on a cluster it must exist on every node, with one uid). ``users``: the store's, or
    None when it could not be read."""
    name = "accounts"
    if not per_user_accounts(settings, as_root=as_root):
        who = settings.task_user or getpass.getuser()
        return skip(name, f"every task runs as {who} (no per-user accounts)"), []
    accounts: list[Account] = []
    broken, unborn = [], []
    for user, account in sorted(settings.task_account_map.items()):
        try:
            found = TaskUser.unprivileged(account, f"task_account_map[{user!r}]")
            accounts.append(Account(user, account, found.uid, found.gid))
        except ValueError as exc:
            broken.append(str(exc))
            accounts.append(Account(user, account, None, None))
    for user in users or ():
        if user in settings.task_account_map:
            continue
        derived = derived_account_name(user)
        try:
            entry = pwd.getpwnam(derived)
        except KeyError:
            unborn.append(f"{user} ({derived})")
            continue
        if entry.pw_gecos != ACCOUNT_MARKER or entry.pw_uid == 0:
            broken.append(f"{derived} (for {user}) exists but was not made by Trainyard")
        else:
            accounts.append(Account(user, derived, entry.pw_uid, entry.pw_gid))
    if broken:
        return fail(name, "; ".join(broken), "create the account (same uid and gid on every machine) or map the "
                    "user to an existing one in task_account_map"), accounts
    known = f"{len(accounts)} mapped or made" + ("" if users is not None else "; the store's users not read")
    if unborn and (cluster or not settings.task_account_create):
        why = "their jobs are refused at submit" if not settings.task_account_create else (
            "on a cluster each must exist on every node with one uid")
        return warn(name, f"{known}; no account yet for {', '.join(unborn)}: {why}",
                    "map them to site accounts in task_account_map (e.g. from LDAP), or create the ty- accounts with "
                    "the same uid on every machine"), accounts
    if unborn:
        known += f"; {len(unborn)} made on first use ({', '.join(unborn)})"
    return ok(name, known), accounts


def check_local_host(settings: Settings, *, as_root: bool) -> list[Check]:
    """The local backend's own needs: the sandbox, the container engine, the GPUs."""
    gpus = None if settings.local_gpus is not None else discover_nvidia_gpus()
    return [_sandbox(settings, as_root=as_root), _containers(settings), _gpus(settings, gpus),
            check_gpu_shares(settings, gpus)]


def _sandbox(settings: Settings, *, as_root: bool) -> Check:
    name = "sandbox"
    if as_root and not per_user_accounts(settings, as_root=as_root) and settings.task_user is None:
        return warn(name, "tasks run as root: no sandbox could hold them", "leave task_accounts at auto (per-user)")
    try:
        sandbox, reason = find_sandbox(settings.task_sandbox, hidden=[settings.home.absolute()], as_root=as_root,
                                       allow_userns=settings.task_user_namespaces)
    except ValueError as exc:
        return fail(name, str(exc), "apt-get install bubblewrap, or task_sandbox: auto")
    if sandbox is not None:
        return ok(name, f"bubblewrap works ({sandbox.bwrap})")
    return warn(name, reason, "apt-get install bubblewrap" if "not installed" in reason else
                "make bubblewrap work here (as root it needs no user namespaces)")


def _containers(settings: Settings) -> Check:
    engine = ContainerEngine.find(settings.container_engine, settings.container_runtime)
    if engine is None:
        return warn("containers", f"no {settings.container_engine}: jobs that name an image fail",
                    f"apt-get install {settings.container_engine}")
    return ok("containers", f"{engine.kind} at {engine.path}")


def _gpus(settings: Settings, found: list[GpuInfo] | None) -> Check:
    if found is None:
        return ok("gpus", f"{settings.local_gpus} simulated slots (local_gpus): NVML not asked")
    if found:
        return ok("gpus", f"{len(found)} through NVML: " + ", ".join(sorted({g.model for g in found})))
    return warn("gpus", "no NVIDIA GPU through NVML: jobs that ask for GPUs wait for ever",
                "install the NVIDIA driver (nvidia-smi must list the GPUs), or --local-gpus N for simulated slots")


def check_gpu_shares(settings: Settings, found: list[GpuInfo] | None) -> Check:
    """Whether a task given part of a GPU is held to it (MPS, ``gpushares``), as ``yard up`` decides."""
    if not found:
        return skip("gpu shares", "no NVIDIA GPU here: nothing to share")
    shares = find_enforcement(settings.gpu_share_enforcement, found, "", threads=settings.gpu_share_threads)
    if shares.control is None:
        return warn("gpu shares", shares.note, "install NVIDIA's nvidia-cuda-mps-control (with the driver's utilities)"
                    if settings.gpu_share_enforcement == "auto" else "gpu_share_enforcement: auto")
    return ok("gpu shares", f"enforced by NVIDIA MPS ({shares.control}), one daemon per user; the devices must be "
              "in the Default compute mode (nvidia-smi -c DEFAULT) for two users' daemons to share one")


def running_as_root() -> bool:
    return os.geteuid() == 0
