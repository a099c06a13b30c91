"""Storages: paths every node has mounted that jobs mount when their owner may (issue 17).

Three kinds, one rule for who may use what:

* an admin's storage (``yard storage create NAME PATH``), granted to users or ``@groups``,
  each grant read-write or read-only; a read-only storage is read-only for every job;
* ``home``, each user's own folder ``<storage_home_root>/<user>``, when the admin sets
  ``storage_home_root``: every user may use their own, read-write;
* ``@group``, a group's shared folder ``<storage_group_root>/<group>``, when the admin sets
  ``storage_group_root``: every member may use it, read-write.

Admins may use every storage, as they may submit to every VC. A job's storages are checked
at submit (``check_storage_uses``: 422 for an unknown storage, 403 for one not granted or
used read-write on a read-only grant, each at its field path) and resolved again at launch
(``task_mounts``), where a storage deleted or a grant taken back since is a failed launch
with the reason; taking a grant back or deleting a storage that a waiting or running job
uses is refused unless forced, as for VCs (``services.removal``).
"""

from __future__ import annotations

import json
import os
import posixpath
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum
from typing import TypeVar

from sqlalchemy.orm import Session

from trainyard.core.clock import Clock
from trainyard.core.names import GROUP_OR_VC_NAME
from trainyard.schemas.storages import StorageGrantView, StorageView
from trainyard.services.auth import get_user
from trainyard.services.errors import Conflict, Forbidden, Invalid, NotFound
from trainyard.spec.models import JobSpec
from trainyard.spec.storages import (
    CONTAINER_SUB_PATH,
    DEFAULT_MOUNT_ROOTS,
    StorageUse,
    all_storage_uses,
    check_mount_path,
    check_mount_root,
    inside,
    mount_path_problem,
    storage_uses,
)
from trainyard.store.queries import environments as env_queries
from trainyard.store.queries import storages as storage_queries
from trainyard.store.queries import users as user_queries
from trainyard.store.queries import vcs as vc_queries
from trainyard.store.rows import DatasetGrantRow, StorageGrantRow, StorageRow, UserRow

HOME = "home"
HOME_MODE = 0o700  # a user's home storage: theirs alone
GROUP_MODE = 0o770  # a group's: its members (see docs: the OS group it needs under per-user accounts)


class Access(IntEnum):
    NONE = 0
    READ_ONLY = 1
    READ_WRITE = 2

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", "-")


@dataclass(frozen=True)
class Storage:
    """A storage as one user sees it: its path resolved (home: theirs), and their access."""

    name: str
    path: str
    read_only: bool
    access: Access
    kind: str = ""
    description: str = ""
    builtin: bool = False
    create_mode: int = 0  # builtin ones are made on first use, with this mode; 0: never


@dataclass(frozen=True)
class PlannedMount:
    """One storage one task mounts: what the controller turns into a backend ``Mount``."""

    name: str
    source: str
    target: str
    read_only: bool
    create_mode: int = 0
    root: str = ""  # the storage's own path, when ``source`` is a subPath of it


class StorageUnavailable(Exception):
    """A job's storage cannot be mounted any more (deleted, or its grant taken back)."""


# -- the built-in storages' roots (settings, kept in the store for the API and controller) --


def set_builtin_roots(session: Session, *, home: str | None, group: str | None) -> None:
    """Record ``storage_home_root`` and ``storage_group_root`` (None: that kind is off)."""
    for key, value in ((storage_queries.HOME_ROOT, home), (storage_queries.GROUP_ROOT, group)):
        storage_queries.set_meta(session, key, None if value is None else check_mount_path(str(value)))


def set_mount_roots(session: Session, roots: Iterable[str]) -> None:
    """Record ``storage_mount_roots``: where a job's own mountPath may put a storage."""
    checked = [check_mount_root(root) for root in roots]
    storage_queries.set_meta(session, storage_queries.MOUNT_ROOTS, json.dumps(checked))


def mount_roots(session: Session) -> tuple[str, ...]:
    value = storage_queries.meta(session, storage_queries.MOUNT_ROOTS)
    return DEFAULT_MOUNT_ROOTS if value is None else tuple(json.loads(value))


def storage_paths(session: Session) -> tuple[str, ...]:
    """Every storage's path on the nodes: each admin's storage, and the home and group roots.
    A sandbox covers them all and binds back only what the task mounts (``sandbox``)."""
    paths = [row.path for row in storage_queries.all_storages(session)]
    for key in (storage_queries.HOME_ROOT, storage_queries.GROUP_ROOT):
        if (root := storage_queries.meta(session, key)) is not None:
            paths.append(root)
    return tuple(sorted(set(paths)))


def _builtin(session: Session, user: UserRow, name: str) -> Storage | None:
    if name == HOME:
        root = storage_queries.meta(session, storage_queries.HOME_ROOT)
        if root is None:
            return None
        return Storage(HOME, posixpath.join(root, user.name), False, Access.READ_WRITE, "home",
                       f"{user.name}'s own storage", True, HOME_MODE)
    if name.startswith("@"):
        root = storage_queries.meta(session, storage_queries.GROUP_ROOT)
        group = vc_queries.group_named(session, name[1:])
        if root is None or group is None:
            return None
        member = user.is_admin or group.id in vc_queries.group_ids_of(session, user.id)
        return Storage(name, posixpath.join(root, group.name), False, Access.READ_WRITE if member else Access.NONE,
                       "group", f"group {group.name}'s shared storage", True, GROUP_MODE)
    return None


# -- admins' storages -----------------------------------------------------------------------


def create_storage(
    session: Session, name: str, path: str, *, read_only: bool, kind: str, description: str, clock: Clock
) -> StorageRow:
    if not GROUP_OR_VC_NAME.fullmatch(name):
        raise Invalid(f"storage name {name!r} is not valid: lowercase letters, digits, '_' and '-', starting with a "
                      "letter, at most 64 characters", details=[{"path": "name", "message": "invalid storage name"}])
    if name == HOME:
        raise Conflict("'home' is each user's own storage (setting storage_home_root); choose another name",
                       details=[{"path": "name", "message": "reserved"}])
    try:
        path = check_mount_path(path)
    except ValueError as exc:
        raise Invalid(f"path: {exc}", details=[{"path": "path", "message": str(exc)}]) from None
    if storage_queries.storage_named(session, name) is not None:
        raise Conflict(f"storage {name!r} already exists", details=[{"path": "name", "message": "exists"}])
    row = StorageRow(name=name, path=path, read_only=read_only, kind=kind, description=description,
                     created_at=clock.now())
    session.add(row)
    session.flush()
    return row


def get_storage(session: Session, name: str) -> StorageRow:
    row = storage_queries.storage_named(session, name)
    if row is None:
        raise NotFound(f"no storage named {name!r}; see `yard storage list`")
    return row


def grant_storage(session: Session, name: str, grantee: str, *, read_only: bool) -> StorageRow:
    """Let a user, or every member of ``@group``, mount the storage (read-only if asked);
    granting again changes the grant's read-only flag."""
    row = get_storage(session, name)
    grant = grant_in(session, row.grants, grantee)
    if grant is None:
        if grantee.startswith("@"):
            grant = StorageGrantRow(group_id=group_id_of(session, grantee))
        else:
            grant = StorageGrantRow(user_id=get_user(session, grantee).id)
        row.grants.append(grant)
    grant.read_only = read_only
    session.flush()
    return row


def group_id_of(session: Session, grantee: str) -> int:
    """The id of the group a grantee ``@name`` names; NotFound if none (storages' and datasets' grants)."""
    group = vc_queries.group_named(session, grantee[1:])
    if group is None:
        raise NotFound(f"no group named {grantee[1:]!r}; see `yard group list`")
    return group.id


Grant = TypeVar("Grant", StorageGrantRow, DatasetGrantRow)


def grant_in(session: Session, grants: Iterable[Grant], grantee: str) -> Grant | None:
    """The grant to ``grantee`` (a user's name, or ``@group``) among ``grants``, if any."""
    if grantee.startswith("@"):
        group_id = group_id_of(session, grantee)
        return next((g for g in grants if g.group_id == group_id), None)
    user_id = get_user(session, grantee).id
    return next((g for g in grants if g.user_id == user_id), None)


def take_grant(session: Session, name: str, grantee: str) -> StorageRow:
    """Remove ``grantee``'s grant (the removal rules are ``services.removal``'s)."""
    row = get_storage(session, name)
    grant = grant_in(session, row.grants, grantee)
    if grant is None:
        raise NotFound(f"{grantee} has no grant on storage {name}; see `yard storage show {name}`")
    row.grants.remove(grant)
    session.flush()
    return row


def access(session: Session, user: UserRow, row: StorageRow, groups: set[int] | None = None) -> Access:
    """What ``user`` may do with an admin's storage: the best of their grants (their own and
    their groups'; ``groups``: their group ids, when the caller has read them), never more
    than the storage allows."""
    if user.is_admin:
        best = Access.READ_WRITE
    else:
        groups = vc_queries.group_ids_of(session, user.id) if groups is None else groups
        mine = [g for g in row.grants if g.user_id == user.id or (g.group_id is not None and g.group_id in groups)]
        best = max((Access.READ_ONLY if g.read_only else Access.READ_WRITE for g in mine), default=Access.NONE)
    return min(best, Access.READ_ONLY) if row.read_only else best


def storages_for(session: Session, user: UserRow, names: Iterable[str]) -> dict[str, Storage | None]:
    """Each storage of ``names`` as ``user`` sees it (None: there is none of that name), read
    in a few queries whatever their number: a submit or a launch asks for all of a job's."""
    wanted = set(names)
    found: dict[str, Storage | None] = {}
    for name in wanted:
        if name == HOME or name.startswith("@"):
            found[name] = _builtin(session, user, name)
    admins = [n for n in wanted if n not in found]
    rows = {row.name: row for row in storage_queries.storages_named(session, admins)} if admins else {}
    groups = vc_queries.group_ids_of(session, user.id) if rows and not user.is_admin else set()
    for name in admins:
        row = rows.get(name)
        found[name] = None if row is None else Storage(
            row.name, row.path, row.read_only, access(session, user, row, groups), row.kind, row.description)
    return found


# -- views ----------------------------------------------------------------------------------


def storage_views(session: Session, viewer: UserRow, name: str | None = None) -> list[StorageView]:
    """Storages by name: an admin sees every one with every grant; a user those they may
    use, with only their own grants. ``name``: that one only (NotFound if it is not theirs)."""
    users = {u.id: u.name for u in user_queries.all_users(session)}
    groups = {g.id: g.name for g in vc_queries.all_groups(session)}
    mine = set() if viewer.is_admin else vc_queries.group_ids_of(session, viewer.id)
    views: list[StorageView] = []
    for row in storage_queries.all_storages(session):
        if name is not None and row.name != name:
            continue
        level = access(session, viewer, row, mine)
        if not viewer.is_admin and level == Access.NONE:
            continue
        shown = [g for g in row.grants
                 if viewer.is_admin or g.user_id == viewer.id or (g.group_id is not None and g.group_id in mine)]
        grants = [StorageGrantView(grantee=users[g.user_id] if g.user_id is not None else "@" + groups[g.group_id or 0],
                                   readOnly=g.read_only) for g in shown]
        views.append(StorageView(name=row.name, path=row.path, readOnly=row.read_only, kind=row.kind,
                                 description=row.description, builtin=False, access=level.label,
                                 grants=sorted(grants, key=lambda g: g.grantee),
                                 notes=folder_notes(row.path, row.read_only) if viewer.is_admin else []))
    builtin_names = [HOME] + ["@" + groups[gid] for gid in sorted(groups, key=groups.__getitem__)
                              if viewer.is_admin or gid in mine]
    for builtin_name in builtin_names:
        if name is not None and builtin_name != name:
            continue
        storage = _builtin(session, viewer, builtin_name)
        if storage is not None and storage.access != Access.NONE:
            views.append(StorageView(name=storage.name, path=storage.path, readOnly=False, kind=storage.kind,
                                     description=storage.description, builtin=True, access=storage.access.label,
                                     grants=[]))
    if name is not None and not views:
        raise NotFound(f"no storage named {name!r} that you may use; see `yard storage list`")
    return views


def folder_notes(path: str, read_only: bool) -> list[str]:
    """What an admin should know of a storage's folder, as this server sees it: missing here,
    or not writable by jobs. A server run as root runs tasks as their owners' accounts
    (``docs/security.md``), so a read-write storage needs a folder those accounts may write
    to; the server cannot tell which of them will, so it says when no one but the folder's
    owner and group can."""
    try:
        info = os.stat(path)
    except OSError:
        return [f"this server does not see {path}: every node that runs its jobs must have it mounted there"]
    if not stat.S_ISDIR(info.st_mode):
        return [f"{path} is not a folder on this server"]
    if read_only or os.geteuid() != 0 or info.st_mode & stat.S_IWOTH:
        return []
    return [f"{path} is writable only by its owner and group (mode {stat.S_IMODE(info.st_mode):04o}, uid "
            f"{info.st_uid}, gid {info.st_gid}), and jobs run as their owners' accounts: they cannot write to it "
            "until you let them: a group of those who may write, with setgid (chgrp; chmod 2770), or, where "
            "every node sandboxes its tasks (grants are enforced there, not by modes), chmod 1777"]


# -- jobs -------------------------------------------------------------------------------------


def _problem(storage: Storage | None, use: StorageUse, user: UserRow) -> tuple[int, str, str] | None:
    """(HTTP status, field path, message) of what is wrong with one use, or None."""
    # OpenPAI's teamwise_storage lists bare names; every other declaration has a name field.
    name_path = use.path if "storageConfigNames" in use.path else f"{use.path}.name"
    if storage is None:
        why = ("home storages are not enabled on this cluster (setting storage_home_root)" if use.name == HOME
               else "group storages are not enabled here, or there is no such group" if use.name.startswith("@")
               else "see `yard storage list`")
        return 422, name_path, f"no storage named {use.name!r}; {why}"
    if storage.access == Access.NONE:
        return 403, name_path, (f"you have no grant for storage {use.name!r}; ask an admin "
                                f"(`yard storage grant {use.name} --user {user.name}`)")
    if use.read_only is False and storage.access == Access.READ_ONLY:
        what = "a read-only storage" if storage.read_only else "granted to you read-only"
        return 403, f"{use.path}.readOnly", (f"storage {use.name!r} is {what}: set readOnly: true, or ask an admin "
                                             "for a read-write grant")
    return None


def _mount_path_field(use: StorageUse) -> str:
    # OpenPAI's teamwise_storage names bare storages, mounted at /mnt/<name>: no mountPath field.
    return use.path if "storageConfigNames" in use.path else f"{use.path}.mountPath"


def _own_path(storage: Storage, use: StorageUse) -> str:
    return posixpath.join(storage.path, use.sub_path) if use.sub_path else storage.path


def _mount_problem(storage: Storage | None, use: StorageUse, roots: tuple[str, ...]) -> tuple[int, str, str] | None:
    """A mountPath the job gave must lie under ``storage_mount_roots``; the storage's own
    path (the default, the admin's) needs no check."""
    if storage is None or use.mount_path is None or use.mount_path == _own_path(storage, use):
        return None
    why = mount_path_problem(use.mount_path, roots)
    return None if why is None else (422, _mount_path_field(use), why)


def _nesting_problems(uses: list[StorageUse], known: dict[str, Storage | None]) -> list[tuple[int, str, str]]:
    """One role's mount points must lie side by side: a mount point inside another storage
    would be found (and could be redirected by a link) through that storage's files."""
    placed = [(use, use.mount_path or _own_path(storage, use)) for use in uses
              if (storage := known.get(use.name)) is not None]
    problems = []
    for index, (use, target) in enumerate(placed):
        # Inside another's, or at the same place as an earlier one.
        outer = next(((u, t) for i, (u, t) in enumerate(placed)
                      if i != index and inside(target, t) and (target != t or i < index)), None)
        if outer is not None:
            where = "at the mount point" if target == outer[1] else "inside the mount point"
            problems.append((422, _mount_path_field(use), (
                f"{use.name!r} would be mounted at {target}, {where} of {outer[0].name!r} ({outer[0].path}, at "
                f"{outer[1]}); mount storages side by side, e.g. /mnt/<name>")))
    return problems


def check_storage_uses(session: Session, user: UserRow, spec: JobSpec) -> None:
    """Refuse a job naming a storage that does not exist (422) or that its owner may not use
    as it asks (403), or a mountPath outside ``storage_mount_roots`` or inside another
    storage's mount point (422), with every problem at its field path."""
    uses = list(all_storage_uses(spec))
    if not uses:
        return
    known = storages_for(session, user, (use.name for use in uses))
    roots = mount_roots(session)
    problems = [p for use in uses if (p := _problem(known[use.name], use, user)) is not None]
    problems += [p for use in uses if (p := _mount_problem(known[use.name], use, roots)) is not None]
    for role in spec.role_names:
        for problem in _nesting_problems(storage_uses(spec, role), known):
            if all(problem[1] != p[1] for p in problems):
                problems.append(problem)
        if _in_a_container(session, spec, role):
            for use in storage_uses(spec, role):
                path = f"{use.path}.subPath"
                if use.sub_path and all(path != p[1] for p in problems):
                    problems.append((422, path, CONTAINER_SUB_PATH))
    if not problems:
        return
    details = [{"path": path, "message": message} for _, path, message in problems]
    status, path, message = next((p for p in problems if p[0] == 422), problems[0])
    error = Invalid if status == 422 else Forbidden
    raise error(f"{path}: {message}", details=details)


def task_mounts(session: Session, user: UserRow, spec: JobSpec, role: str) -> list[PlannedMount]:
    """What a task of ``role`` mounts, resolved now (at launch): StorageUnavailable naming
    the storage when one was deleted or its grant taken back since the job was submitted."""
    mounts: list[PlannedMount] = []
    uses = storage_uses(spec, role)
    if not uses:
        return mounts
    known = storages_for(session, user, (use.name for use in uses))
    roots = mount_roots(session)
    for use in uses:
        storage = known[use.name]
        problem = _problem(storage, use, user)
        if problem is not None or storage is None:
            detail = problem[2] if problem is not None else "it is gone"
            raise StorageUnavailable(f"storage {use.name!r} ({use.path}) cannot be mounted any more: {detail}")
        if (misplaced := _mount_problem(storage, use, roots)) is not None:
            raise StorageUnavailable(f"storage {use.name!r} cannot be mounted: {misplaced[1]}: {misplaced[2]}")
        source = _own_path(storage, use)
        read_only = use.read_only if use.read_only is not None else storage.access == Access.READ_ONLY
        mounts.append(PlannedMount(use.name, source, use.mount_path or source, read_only,
                                   storage.create_mode if not use.sub_path else 0, storage.path))
    if nested := _nesting_problems(uses, known):
        raise StorageUnavailable(f"storages cannot be mounted ({nested[0][1]}): {nested[0][2]}")
    return mounts


def jobs_losing_storage(session: Session, jobs: list[tuple[UserRow, JobSpec, int]]) -> list[int]:
    """Of (owner, spec, job id), the ids of jobs whose owner may no longer mount one of the
    job's storages as it asks (after a change in this session)."""
    session.flush()
    lost = []
    for user, spec, job_id in jobs:
        uses = list(all_storage_uses(spec))
        known = storages_for(session, user, (use.name for use in uses))
        if any(_problem(known[use.name], use, user) is not None for use in uses):
            lost.append(job_id)
    return lost


def _in_a_container(session: Session, spec: JobSpec, role: str) -> bool:
    """Whether the role's tasks run in a container: it names an image, or its environment
    is an image (an admin's base environment)."""
    if spec.role_image(role) is not None:
        return True
    named = spec.environment_of(role)
    row = None if named is None else env_queries.environments_named(session, [named]).get(named)
    return row is not None and row.image is not None
