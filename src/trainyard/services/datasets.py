"""Datasets (issue 35): named, versioned data that each node keeps in a cache of its own
(``backends/datacache.py``) for every job allowed to read it.

Who may do what, as for storages (``services.storages``): whoever registers a dataset owns
it; its owner grants it to users and ``@groups``; admins see and change every one. A job's
datasets are checked at submit (``check_dataset_uses``: 422 for an unknown dataset or a
mountPath outside ``storage_mount_roots``, 403 for one its owner may not read, each at its
field path) and resolved again at launch (``task_datasets``), where a dataset removed, a
grant taken back, or its storage no longer readable by its owner is a failed launch with the
reason. Registering a name again (its owner or an admin) changes its source or version: the
next task that reads it fetches the new version; running tasks keep the one they mount.
"""

from __future__ import annotations

import os
import posixpath
import re
import urllib.parse
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from trainyard.backends.base import DatasetCaches, DatasetFetch, NodeDatasetCache
from trainyard.core.addresses import host_refusal
from trainyard.core.clock import Clock
from trainyard.schemas.datasets import CacheEntryView, DatasetView, NodeCacheView
from trainyard.services.auth import get_user
from trainyard.services.errors import Conflict, Forbidden, Invalid, NotFound
from trainyard.services.storages import (
    Access,
    StorageUnavailable,
    grant_in,
    group_id_of,
    mount_roots,
    storages_for,
)
from trainyard.spec.datasets import DATASET_NAME, DatasetUse, all_dataset_uses, dataset_uses
from trainyard.spec.models import JobSpec
from trainyard.spec.storages import check_sub_path, inside, mount_path_problem, storage_uses
from trainyard.store.queries import datasets as dataset_queries
from trainyard.store.queries import users as user_queries
from trainyard.store.queries import vcs as vc_queries
from trainyard.store.rows import DatasetGrantRow, DatasetRow, UserRow

STORAGE_SOURCE = "storage:"
RESERVED_NAME = "cache"  # GET /datasets/cache is the nodes' caches  # storage:NAME/PATH, a folder of a storage
_URL = re.compile(r"https?://[A-Za-z0-9.\-\[\]:]+(/[!-~]*)?")
_SHA256 = re.compile(r"[0-9a-f]{64}")


class DatasetUnavailable(StorageUnavailable):
    """A job's dataset cannot be read any more (removed, its grant or its storage taken back)."""


def _invalid(path: str, message: str) -> Invalid:
    return Invalid(f"{path}: {message}", details=[{"path": path, "message": message}])


# -- registering ----------------------------------------------------------------------------


def _storage_source(source: str) -> tuple[str, str]:
    """``storage:NAME/PATH`` as (storage name, relative path), or Invalid at ``source``."""
    rest = source[len(STORAGE_SOURCE):]
    name, _, sub = rest.partition("/")
    try:
        return name, check_sub_path(sub)
    except ValueError as exc:
        raise _invalid("source", f"the path inside storage {name!r} {exc}") from None


def _missing_folder(root: str, sub: str) -> str | None:
    """Why ``sub`` is no folder inside the storage at ``root``, where this server sees the
    storage (None: it is one, or the storage's path is not on this machine, as on a Slurm
    cluster whose nodes alone mount it). Walked from ``root`` without following a link."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(root, flags)
    except OSError:
        return None
    try:
        for part in [p for p in sub.split("/") if p]:
            try:
                step = os.open(part, flags, dir_fd=fd)
            except FileNotFoundError:
                return f"there is no folder {sub!r} in the storage (its path {root} has no {part!r} there)"
            except OSError:
                return f"{sub!r} is not a folder in the storage (a file, or a link, which a dataset never follows)"
            os.close(fd)
            fd = step
    finally:
        os.close(fd)
    return None


def _check_source(session: Session, owner: UserRow, source: str, allowed_hosts: Sequence[str]) -> str:
    """An http(s) URL, or a folder of a storage ``owner`` may read; Invalid/Forbidden at ``source``."""
    if source.startswith(STORAGE_SOURCE):
        name, _ = _storage_source(source)
        storage = storages_for(session, owner, [name])[name] if name else None
        if storage is None:
            raise _invalid("source", f"there is no storage {name!r}; see `yard storage list`")
        if storage.access == Access.NONE:
            raise Forbidden(f"source: you may not read storage {name!r}; ask an admin for a grant",
                            details=[{"path": "source", "message": "storage not granted"}])
        if (missing := _missing_folder(storage.path, _storage_source(source)[1])) is not None:
            raise _invalid("source", missing)
        return source
    if source.lower().startswith(("s3://", "gs://")):
        raise _invalid("source", f"{source.split(':', 1)[0]}:// URLs are not taken: the nodes hold no cloud "
                                 "credentials to read them with; give the object's https URL (a public object's, or "
                                 "a pre-signed one valid for as long as nodes may fetch it)")
    if source.lower().startswith(("http://", "https://")) and "@" in source.split("/", 3)[2]:
        raise _invalid("source", "credentials in URLs (user:password@) are refused: every reader of the dataset "
                                 "would see them; serve the data where the nodes may read it without them, or give "
                                 "a pre-signed https URL")
    if not _URL.fullmatch(source):
        raise _invalid("source", "must be an http:// or https:// URL (printable, no spaces) or storage:NAME/PATH "
                                 f"(got {source[:200]!r})")
    parts = urllib.parse.urlsplit(source)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise _invalid("source", f"has no valid port (got {source[:200]!r})") from None
    if (why := host_refusal(parts.hostname or "", port, allowed_hosts)) is not None:
        # Nodes fetch as root: the server's API, its database or cloud metadata are not a
        # user's to read (checked again at every fetch, redirects included).
        raise _invalid("source", f"{why}: a dataset is never fetched from there; an admin may allow the host with "
                                 "the setting dataset_allowed_hosts")
    return source


def register_dataset(session: Session, user: UserRow, name: str, *, source: str, version: str, sha256: str,
                     description: str, clock: Clock, allowed_hosts: Sequence[str] = ()) -> DatasetRow:
    """Register ``name``, or change it (its owner or an admin): a new source or version is
    fetched again by the next task that reads it."""
    if not DATASET_NAME.fullmatch(name):
        raise _invalid("name", "a dataset's name is lowercase letters, digits, '_' and '-', starting with a letter, "
                               "at most 64 characters")
    if name == RESERVED_NAME:
        raise _invalid("name", "'cache' names the nodes' caches (`yard dataset cache`); choose another name")
    sha256 = sha256.lower()
    if sha256 and not _SHA256.fullmatch(sha256):
        raise _invalid("sha256", "must be 64 hexadecimal digits (sha256sum's output)")
    if sha256 and source.startswith(STORAGE_SOURCE):
        raise _invalid("sha256", "is checked for a downloaded archive only; a storage's folder is named by its version")
    version = version.strip() or sha256
    if not version:
        raise _invalid("version", "give a version (any text naming this version of the data, e.g. 2024-05 or v3) or "
                                  "the archive's sha256: a node fetches a dataset again only when its version changes")
    row = dataset_queries.dataset_named(session, name)
    owner = user if row is None else row_owner(session, row)
    if row is not None and not (user.is_admin or row.owner_id == user.id):
        raise Conflict(f"dataset {name!r} is registered by another user; choose another name",
                       details=[{"path": "name", "message": "taken"}])
    source = _check_source(session, owner, source, allowed_hosts)
    now = clock.now()
    if row is None:
        row = DatasetRow(name=name, owner_id=user.id, created_at=now)
        session.add(row)
    row.source, row.version, row.sha256, row.description, row.updated_at = source, version, sha256, description, now
    session.flush()
    return row


def row_owner(session: Session, row: DatasetRow) -> UserRow:
    owner = user_queries.user_by_id(session, row.owner_id)
    assert owner is not None  # the foreign key cascades
    return owner


def _owned(session: Session, user: UserRow, name: str) -> DatasetRow:
    """The dataset, for a change by its owner or an admin; NotFound for those who may not see it."""
    row = dataset_queries.dataset_named(session, name)
    if row is None or not may_read(session, user, row):
        raise NotFound(f"no dataset named {name!r} that you may read; see `yard dataset list`")
    if not (user.is_admin or row.owner_id == user.id):
        raise Forbidden(f"only the owner of dataset {name!r} or an admin may change it")
    return row


def remove_dataset(session: Session, user: UserRow, name: str) -> None:
    """Forget a dataset (never a source's files). Nodes' cached copies go as the cache needs
    room. ``removal.remove_dataset`` refuses it while waiting or running jobs read it."""
    session.delete(_owned(session, user, name))
    session.flush()


def grant_dataset(session: Session, user: UserRow, name: str, grantee: str) -> DatasetRow:
    row = _owned(session, user, name)
    if grant_in(session, row.grants, grantee) is None:
        row.grants.append(DatasetGrantRow(group_id=group_id_of(session, grantee)) if grantee.startswith("@")
                          else DatasetGrantRow(user_id=get_user(session, grantee).id))
    session.flush()
    return row


def revoke_dataset_grant(session: Session, user: UserRow, name: str, grantee: str) -> DatasetRow:
    row = _owned(session, user, name)
    grant = grant_in(session, row.grants, grantee)
    if grant is None:
        raise NotFound(f"{grantee} has no grant on dataset {name}; see `yard dataset show {name}`")
    row.grants.remove(grant)
    session.flush()
    return row


# -- who may read what --------------------------------------------------------------------


def may_read(session: Session, user: UserRow, row: DatasetRow, groups: set[int] | None = None) -> bool:
    if user.is_admin or row.owner_id == user.id:
        return True
    groups = vc_queries.group_ids_of(session, user.id) if groups is None else groups
    return any(g.user_id == user.id or (g.group_id is not None and g.group_id in groups) for g in row.grants)


def _access_label(user: UserRow, row: DatasetRow) -> str:
    return "owner" if row.owner_id == user.id else "admin" if user.is_admin else "granted"


def dataset_views(session: Session, viewer: UserRow, name: str | None = None) -> list[DatasetView]:
    """The datasets ``viewer`` may read, by name (``name``: that one, or NotFound); the
    grants in full for its owner and admins, else only the viewer's own."""
    users = {u.id: u.name for u in user_queries.all_users(session)}
    groups = {g.id: g.name for g in vc_queries.all_groups(session)}
    mine = set() if viewer.is_admin else vc_queries.group_ids_of(session, viewer.id)
    views = []
    for row in dataset_queries.all_datasets(session):
        if (name is not None and row.name != name) or not may_read(session, viewer, row, mine):
            continue
        full = viewer.is_admin or row.owner_id == viewer.id
        shown = [g for g in row.grants
                 if full or g.user_id == viewer.id or (g.group_id is not None and g.group_id in mine)]
        grants = sorted(users[g.user_id] if g.user_id is not None else "@" + groups[g.group_id or 0] for g in shown)
        views.append(DatasetView(name=row.name, owner=users.get(row.owner_id, "?"), source=row.source,
                                 version=row.version, sha256=row.sha256, description=row.description,
                                 createdAt=row.created_at, updatedAt=row.updated_at,
                                 access=_access_label(viewer, row), grants=grants))
    if name is not None and not views:
        raise NotFound(f"no dataset named {name!r} that you may read; see `yard dataset list`")
    return views


# -- jobs -------------------------------------------------------------------------------------


def _problem(row: DatasetRow | None, use: DatasetUse, user: UserRow, session: Session,
             roots: tuple[str, ...]) -> tuple[int, str, str] | None:
    if row is None:
        return 422, f"{use.path}.name", f"there is no dataset {use.name!r}; see `yard dataset list`"
    if not may_read(session, user, row):
        return 403, f"{use.path}.name", (f"you may not read dataset {use.name!r}; ask its owner for a grant "
                                         f"(`yard dataset grant {use.name} --user {user.name}`)")
    if (misplaced := mount_path_problem(use.mount_path, roots, "dataset")) is not None:
        return 422, use.mount_path_field, misplaced
    return None


def _nesting(spec: JobSpec, role: str) -> tuple[int, str, str] | None:
    """A dataset's mount point at, inside or over another dataset's or a storage's with a
    mountPath (the sandbox would refuse it at launch; said here, at its field)."""
    datasets = [(use.path, use.name, use.mount_path) for use in dataset_uses(spec, role)]
    storages = [(use.path, use.name, use.mount_path) for use in storage_uses(spec, role) if use.mount_path]
    for index, (path, name, target) in enumerate(datasets):
        for other_path, other_name, other in [*datasets[:index], *datasets[index + 1:], *storages]:
            if inside(target, other) or inside(other, target):
                return 422, f"{path}.mountPath", (f"{name!r} would be mounted at {target}, which meets the mount point "
                                                  f"of {other_name!r} ({other_path}, at {other}); mount side by side, "
                                                  "e.g. /data/<name>")
    return None


def check_dataset_uses(session: Session, user: UserRow, spec: JobSpec) -> None:
    """Refuse a job naming a dataset that does not exist or a mountPath that may not be used
    (422), or a dataset its owner may not read (403), every problem at its field path."""
    uses = list(all_dataset_uses(spec))
    if not uses:
        return
    rows = dataset_queries.datasets_named(session, sorted({use.name for use in uses}))
    roots = mount_roots(session)
    problems = [p for use in uses if (p := _problem(rows.get(use.name), use, user, session, roots)) is not None]
    for role in spec.role_names:
        if (nested := _nesting(spec, role)) is not None and all(nested[1] != p[1] for p in problems):
            problems.append(nested)
    if not problems:
        return
    details = [{"path": path, "message": message} for _, path, message in problems]
    status, path, message = next((p for p in problems if p[0] == 422), problems[0])
    raise (Invalid if status == 422 else Forbidden)(f"{path}: {message}", details=details)


def task_datasets(session: Session, user: UserRow, spec: JobSpec, role: str) -> list[DatasetFetch]:
    """What a task of ``role`` reads, resolved now (at launch): DatasetUnavailable naming the
    dataset when it was removed, its grant taken back, or its storage is no longer readable."""
    uses = dataset_uses(spec, role)
    if not uses:
        return []
    rows = dataset_queries.datasets_named(session, [use.name for use in uses])
    fetches = []
    for use in uses:
        row = rows.get(use.name)
        if row is None or not may_read(session, user, row):
            why = "it was removed" if row is None else "its owner took back your grant"
            raise DatasetUnavailable(f"dataset {use.name!r} ({use.path}) cannot be read any more: {why}")
        source, root, reader = row.source, "", ""
        if source.startswith(STORAGE_SOURCE):
            name, sub = _storage_source(source)
            storage = storages_for(session, row_owner(session, row), [name])[name]
            if storage is None or storage.access == Access.NONE:
                raise DatasetUnavailable(f"dataset {use.name!r} cannot be read: its storage {name!r} is gone or no "
                                         "longer readable by the dataset's owner")
            root, reader = storage.path, row_owner(session, row).name
            source = posixpath.join(storage.path, sub) if sub else storage.path
        fetches.append(DatasetFetch(use.name, source, row.version, use.mount_path, row.sha256, root, reader))
    return fetches


# -- the nodes' caches ----------------------------------------------------------------------


def _timestamp(when: datetime) -> float:
    return (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp()


def _when(value: float | None) -> datetime | None:
    return None if value is None else datetime.fromtimestamp(value, UTC)


def node_caches(backend: object) -> list[NodeDatasetCache]:
    """Each node's cache, as its backend reads it (none where the backend keeps no cache)."""
    return backend.dataset_caches() if isinstance(backend, DatasetCaches) else []


def cache_views(session: Session, caches: Iterable[NodeDatasetCache], viewer: UserRow) -> list[NodeCacheView]:
    """Each node's cache: an admin sees every entry; a user the entries of datasets they may
    read, fetched since the dataset was registered under its name (an entry of an earlier
    dataset of that name, another user's perhaps, is not theirs to see), the totals the
    node's either way."""
    readable: dict[str, float] | None = None
    if not viewer.is_admin:
        readable = {view.name: _timestamp(view.createdAt) for view in dataset_views(session, viewer)}
    return [NodeCacheView(
        node=cache.node, capacityBytes=cache.capacity_bytes, usedBytes=cache.used_bytes, hits=cache.hits,
        misses=cache.misses, bytesFetched=cache.bytes_fetched, evictions=cache.evictions,
        fetchFailures=cache.fetch_failures,
        entries=[CacheEntryView(dataset=e.dataset, version=e.version, key=e.key, bytes=e.size, files=e.files,
                                fetchedAt=_when(e.fetched_at), lastUsedAt=_when(e.last_used_at), inUse=e.in_use)
                 for e in cache.entries
                 if readable is None or (e.dataset in readable and (e.fetched_at or 0.0) >= readable[e.dataset])])
        for cache in caches]
