"""What every backend does alike with a task's storages (``TaskLaunch.mounts``): the
``$TRAINYARD_STORAGE_<NAME>`` variables, making a home or group storage on first use, and
the notes a task's log gets where a backend cannot honour a mount as asked; and with its
datasets (``TaskLaunch.datasets``): read-only mounts of the node cache's entries.

Shared by the local and Slurm backends (and containers), so that none imports another.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from trainyard.backends.base import CacheEntry, DatasetFetch, Mount, NodeDatasetCache
from trainyard.backends.datacache import DEFAULT_CAPACITY_BYTES, DEFAULT_FETCH_TIMEOUT_SECONDS, NodeCache
from trainyard.backends.taskaccounts import TaskAccounts
from trainyard.backends.taskuser import TaskUser
from trainyard.spec.datasets import dataset_variable
from trainyard.spec.storages import storage_variable


def mount_env(mounts: Sequence[Mount], *, inside: bool) -> dict[str, str]:
    """``$TRAINYARD_STORAGE_<NAME>`` of each storage: where the task finds it, its mountPath
    when the backend mounts it there (``inside``: a container or the sandbox), else the
    storage's path on the node."""
    return {storage_variable(m.name): m.target if inside else m.source for m in mounts}


def make_missing_storage(mount: Mount, uid: int | None, gid: int | None) -> bool:
    """Make a home or group storage's folder (``create_mode``) when it is missing, owned by
    ``uid``/``gid`` (None: this process's account); its root must exist (the admin's mount).
    True when it was made."""
    if not mount.create_mode:
        return False
    path = Path(mount.source)
    if path.is_dir():
        return False
    if not path.parent.is_dir():
        raise ValueError(f"storage {mount.name!r}: {path.parent} does not exist on this node; is the storage "
                         "root mounted here?")
    try:
        os.mkdir(path, mount.create_mode)
    except FileExistsError:
        return False  # another task made it meanwhile
    os.chmod(path, mount.create_mode)  # past the umask
    if uid is not None and gid is not None:
        os.chown(path, uid, gid, follow_symlinks=False)
    return True


def unenforced_notes(mounts: Sequence[Mount], why: str) -> list[str]:
    """Lines for a task's log where its storages are given as plain paths (no container, no
    sandbox): a read-only mount is not enforced, and a mountPath is not where it is."""
    notes = []
    for m in mounts:
        if m.read_only:
            notes.append(f"trainyard: storage {m.name!r} is read-only for this job, but {why}: read-only is not "
                         f"enforced; do not write to {m.source}")
        if m.target != m.source:
            notes.append(f"trainyard: storage {m.name!r} is at {m.source}, not at its mountPath {m.target}, "
                         f"because {why}; ${storage_variable(m.name)} says where it is")
    return notes


# -- datasets (issue 35): read-only mounts of the node's cache's entries ----------------------


def account_reader(accounts: TaskAccounts | None, run_as: TaskUser | None, user: str) -> tuple[int, list[int]] | None:
    """The account whose permissions root honours copying ``user``'s storage folder into the
    dataset cache: the one their tasks run as (None: the server's own, which copies it);
    ValueError where ``user`` has none."""
    account = accounts.account_for(user) if accounts is not None else run_as
    if account is None:
        return None
    return account.uid, os.getgrouplist(account.name, account.gid)


class NodeDatasets:
    """What a backend does with its tasks' datasets on one node: each a read-only mount of
    its entry in the node's cache (``datacache``), complete before the task starts (the
    supervisor or task runner fetches it first, ``NodeCache.ensure``)."""

    def __init__(self, root: Path, capacity: int | None = None, *, timeout: float = DEFAULT_FETCH_TIMEOUT_SECONDS,
                 allowed_hosts: Sequence[str] = ()) -> None:
        self.cache = NodeCache(root.absolute(), DEFAULT_CAPACITY_BYTES if capacity is None else capacity,
                               timeout=timeout, allowed_hosts=tuple(allowed_hosts))
        # A storage folder's reader (a Trainyard user) as the (uid, groups) whose permissions
        # its copy honours; None: no account to honour (tasks run as the server's own account,
        # which copies it itself). Set by the backend, which knows the task accounts.
        self.reader_of: Callable[[str], tuple[int, list[int]] | None] = lambda _: None
        # Made now, root's alone: a sandbox covers it, and binds back only a task's own entries.
        try:
            self.cache.make_dirs()
        except PermissionError as exc:  # a folder someone else made stops the server here, saying so
            raise RuntimeError(str(exc)) from None

    @property
    def root(self) -> Path:
        return self.cache.root

    def entry(self, dataset: DatasetFetch) -> str:
        return str(self.cache.root / "entries" / dataset.key)

    def mounts(self, datasets: Sequence[DatasetFetch]) -> tuple[Mount, ...]:
        return tuple(Mount(self.entry(d), d.target, True, d.name, 0, self.entry(d)) for d in datasets)

    def env(self, datasets: Sequence[DatasetFetch], *, inside: bool) -> dict[str, str]:
        """``$TRAINYARD_DATASET_<NAME>``: the mountPath in a sandbox or container, else the entry."""
        return {dataset_variable(d.name): d.target if inside else self.entry(d) for d in datasets}

    def prefetch(self, datasets: Sequence[DatasetFetch]) -> list[str]:
        """Each dataset into the cache unless it is there, mounted by no task yet; the
        problems, one line each (a prefetch never fails a job: its task fetches again)."""
        problems = []
        for item in self.plan(datasets)["items"]:
            try:
                self.cache.ensure(item, use=False)
            except Exception as exc:  # noqa: BLE001 - hostile or broken sources: said, then the task's turn
                problems.append(f"dataset {item['name']} (version {item['version']}): {exc}")
        return problems

    def plan(self, datasets: Sequence[DatasetFetch]) -> dict[str, Any]:
        """The task spec's ``datasets``: what is fetched before the task starts."""
        return fetch_plan(self.cache, datasets, self.reader_of)

    def report(self, node: str) -> NodeDatasetCache:
        """What ``DatasetCaches`` says of this node's cache, read from its files."""
        return cache_report(node, self.cache.read())


def fetch_plan(cache: NodeCache, datasets: Sequence[DatasetFetch],
               reader_of: Callable[[str], tuple[int, list[int]] | None]) -> dict[str, Any]:
    """What ``NodeCache.ensure`` is given on the node (the local supervisor, or the Slurm
    node's ``dataset-step.py``): the cache and each dataset, a folder's with its reader."""
    return {"root": str(cache.root), "capacity": cache.capacity, "timeout": cache.timeout,
            "allowed_hosts": list(cache.allowed_hosts),
            "items": [{"key": d.key, "name": d.name, "version": d.version, "source": d.source,
                       "sha256": d.sha256, "storage_root": d.storage_root,
                       "reader": _reader(d, reader_of)} for d in datasets]}


def _reader(dataset: DatasetFetch, reader_of: Callable[[str], tuple[int, list[int]] | None]) -> list[Any] | None:
    if not dataset.storage_root:
        return None
    try:
        reader = reader_of(dataset.reader)
    except ValueError:  # no account for the owner: nothing is copied with root's eyes
        return [-1, []]
    return None if reader is None else [reader[0], list(reader[1])]


def cache_report(node: str, seen: dict[str, Any]) -> NodeDatasetCache:
    """``NodeCache.read``'s answer as ``DatasetCaches`` says it (KeyError, TypeError or
    ValueError where it is not one: a Slurm node's report, read from a file)."""
    return NodeDatasetCache(
        node=node, capacity_bytes=int(seen["capacity"]), used_bytes=int(seen["used"]), hits=int(seen["hits"]),
        misses=int(seen["misses"]), bytes_fetched=int(seen["bytes_fetched"]), evictions=int(seen["evictions"]),
        fetch_failures=int(seen.get("fetch_failures", 0)),
        entries=tuple(CacheEntry(dataset=str(e["dataset"]), version=str(e["version"]), key=str(e["key"]),
                                 size=int(e["size"]), files=int(e["files"]), fetched_at=_seconds(e.get("fetched_at")),
                                 last_used_at=_seconds(e.get("last_used_at")), in_use=int(e["in_use"]))
                      for e in seen["entries"]))


def _seconds(value: Any) -> float | None:
    return None if value is None else float(value)
