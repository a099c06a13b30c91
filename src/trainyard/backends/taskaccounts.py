"""Which OS account runs a Trainyard user's tasks (per-user accounts; the server is root).

Each Trainyard user's tasks run as an OS account of their own, so the kernel keeps one
user's task files, processes and secrets from another's. The account is, in order:

1. the one the admin configured for that user (``task_account_map``: ``{alice: alice}``);
2. else ``ty-<name>``, when the Trainyard name is a valid account name and the result is at
   most 32 characters; else ``ty_<16 hex digits of SHA-256(name)>``. The two forms cannot
   collide (``-`` against ``_`` after ``ty``), and no Trainyard name reaches the account
   name unless it is made of ``[a-z0-9_-]`` only;
3. created on first use with ``useradd --system`` (no home, no login shell, its own group)
   and a marker in its comment field; an existing ``ty-`` account without that marker was
   not made by Trainyard and is refused rather than taken over.

Names reach ``useradd`` as one argv item, never through a shell.
"""

from __future__ import annotations

import hashlib
import logging
import os
import pwd
import re
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from trainyard.backends.taskuser import TaskUser

log = logging.getLogger(__name__)

ACCOUNT_PREFIX = "ty-"
HASHED_PREFIX = "ty_"
ACCOUNT_MARKER = "Trainyard task account"  # the comment (GECOS) field of accounts we create
MAX_ACCOUNT_NAME = 32
# Portable account names (shadow's and POSIX's common ground), minus the dot.
_ACCOUNT_SAFE = re.compile(r"[a-z0-9_-]+")
NO_HOME = "/nonexistent"
# useradd(8): "can't update password file" / "group file", e.g. while another holds its lock.
_USERADD_CANNOT_LOCK = (1, 10)
_USERADD_RETRY_SECONDS = 10.0  # Debian's convention for system accounts without a home


def derived_account_name(trainyard_user: str) -> str:
    """The account name Trainyard derives for a user (see the module docstring)."""
    candidate = ACCOUNT_PREFIX + trainyard_user
    if _ACCOUNT_SAFE.fullmatch(trainyard_user) and len(candidate) <= MAX_ACCOUNT_NAME:
        return candidate
    return HASHED_PREFIX + hashlib.sha256(trainyard_user.encode("utf-8", "surrogateescape")).hexdigest()[:16]


class TaskAccounts:
    """Maps Trainyard users to the OS accounts their tasks run as; creates missing ones.

    Needs root: the supervisor switches each task to its account, and only root may.
    """

    def __init__(self, mapping: Mapping[str, str] | None = None, *, create: bool = True) -> None:
        if os.geteuid() != 0:
            raise ValueError(
                "per-user task accounts need the server to run as root (it switches each task to"
                f" its user's account); this process runs as uid {os.geteuid()}"
            )
        self._mapping = dict(mapping or {})
        self._create = create
        self._lock = threading.Lock()
        self._known: dict[str, TaskUser] = {}
        for trainyard_user, account in self._mapping.items():  # fail at start-up, not at launch
            self._known[trainyard_user] = _configured(trainyard_user, account)

    def account_for(self, trainyard_user: str) -> TaskUser:
        """The account that runs ``trainyard_user``'s tasks; ValueError when there is none."""
        if not isinstance(trainyard_user, str) or not trainyard_user:
            raise ValueError("per-user task accounts need the job owner's Trainyard user name")
        with self._lock:
            if (known := self._known.get(trainyard_user)) is not None:
                if _still_there(known):
                    return known
                if trainyard_user in self._mapping:  # the site's account: never made here
                    raise ValueError(
                        f"the OS account {known.name!r} that task_account_map gives Trainyard user"
                        f" {trainyard_user!r} no longer exists (or was renumbered): recreate it, or map"
                        " another and restart yard up"
                    )
                del self._known[trainyard_user]  # ours, removed since: made again below
            name = derived_account_name(trainyard_user)
            account = self._existing(trainyard_user, name)
            if account is None:
                if not self._create:
                    raise ValueError(
                        f"no OS account for Trainyard user {trainyard_user!r}: map one in"
                        f" task_account_map, or create {name!r}"
                    )
                account = self._add(trainyard_user, name)
            self._known[trainyard_user] = account
            return account

    @staticmethod
    def _existing(trainyard_user: str, name: str) -> TaskUser | None:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            return None
        if entry.pw_gecos != ACCOUNT_MARKER or entry.pw_uid == 0:
            raise ValueError(
                f"the OS account {name!r} (for Trainyard user {trainyard_user!r}) exists but was not"
                " created by Trainyard; map the user to an account in task_account_map, or remove it"
            )
        return TaskUser.of(entry)

    def _add(self, trainyard_user: str, name: str) -> TaskUser:
        shell = "/usr/sbin/nologin" if Path("/usr/sbin/nologin").exists() else "/bin/false"
        argv = [
            "useradd", "--system", "--user-group", "--no-create-home", "--home-dir", NO_HOME,
            "--shell", shell, "--comment", ACCOUNT_MARKER, name,
        ]
        deadline = time.monotonic() + _USERADD_RETRY_SECONDS
        while True:
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise ValueError(f"could not create the OS account {name!r}: {exc}") from exc
            if done.returncode == 0:
                break
            # Another server (or a test) may have created it meanwhile: accept that one.
            if (account := self._existing(trainyard_user, name)) is not None:
                return account
            # useradd fails at once when another process holds /etc/passwd's lock.
            if done.returncode not in _USERADD_CANNOT_LOCK or time.monotonic() > deadline:
                raise ValueError(f"useradd {name} failed: {done.stderr.strip() or done.returncode}")
            time.sleep(0.1)
        log.info("created OS account %s for the tasks of Trainyard user %s", name, trainyard_user)
        account = self._existing(trainyard_user, name)
        if account is None:
            raise ValueError(f"useradd {name} succeeded but the account cannot be found")
        return account


def _configured(trainyard_user: str, account: str) -> TaskUser:
    return TaskUser.unprivileged(account, f"task_account_map[{trainyard_user!r}]")


def _still_there(account: TaskUser) -> bool:
    """Whether ``account`` still exists with the ids it had (someone may have removed it
    since it was looked up: a job must then be refused, not run as a bare uid)."""
    try:
        entry = pwd.getpwnam(account.name)
    except KeyError:
        return False
    return (entry.pw_uid, entry.pw_gid) == (account.uid, account.gid)
