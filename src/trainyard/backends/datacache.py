"""A node's dataset cache (issue 35): datasets fetched once per node and version, shared by
every task that reads them, evicted least recently used when no running task mounts them.

Standard library only (a miss imports ``datafetch``, which adds ``core.workdirs``' name
check, itself stdlib-only): the local
backend's supervisor runs it, from its private copy, in the task's process before the task
starts (``supervisor._exec_task``), as root where the server is root; the server reads the
same files for ``/metrics`` and ``yard dataset cache``.

Layout under the cache's root (root's, 0700: a task sees only the entries it mounts, bound
read-only into its sandbox or container)::

    entries/KEY/         a complete dataset: folders 0755, files 0644, nothing else
    meta/KEY.json        what it is (name, version, size, files, when fetched); its mtime:
                         when a task last mounted it (LRU)
    locks/KEY.lock       flock: held while the entry is fetched, a use recorded, or it is evicted
    uses/KEY/PID-START   a task that mounts it (its process, checked by start time): an entry
                         with a live use is never evicted
    partial/KEY.PID      a fetch under way; found while holding the entry's lock, it is what an
                         interrupted fetch left, and is removed before the fetch is tried again
    stats.json           hits (tasks that found their data here), misses (fetches: a task's,
                         or a prefetch's for a waiting job), bytes fetched (as read from the
                         source: an archive's compressed bytes; a failed fetch's too),
                         evictions, fetch failures (under cache.lock)

The crash-safety protocol, step by step:

1. Take the entry's lock (``ensure``). Only one process per node fetches a key; a second
   task that needs it waits here, then finds it complete (one fetch, two tasks).
2. Remove what an interrupted fetch of this key left in ``partial/`` (its process is gone:
   it held the lock we now hold).
3. If ``entries/KEY`` exists it is complete (a hit, if a task asks: a prefetch that finds
   it there counts nothing, so that hits are tasks that found their data).
4. Otherwise fetch into ``partial/KEY.PID``, then write its meta and rename it to
   ``entries/KEY``: a partly fetched dataset is never at the path a task mounts.
5. Record the use (``uses/KEY/PID-START``), touch the meta (last use), release the lock.
6. Evict (``evict``, under ``cache.lock``; also during step 4, every 1/16 of the capacity
   or 64 MiB fetched, counting the bytes fetched so far, so that the cache holds its
   capacity while it fetches, not only after): while the entries' bytes exceed the capacity,
   the least recently used entry that no live task uses and whose lock is free is renamed
   into ``partial/`` and removed.

The source is hostile as far as root is concerned (``datafetch``): an archive holds only
folders and regular files under names ``core.workdirs.check_name`` accepts (no absolute
name, no ``..``, no control character), never a link, a device or a FIFO; a storage's folder
is walked from its root without following a link at any step, and only its folders and
regular files are copied. A key is ``DatasetFetch.key`` (name and a hash of source and version), checked
against ``KEY`` here: no name a user shaped becomes a path outside the cache.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

KEY = re.compile(r"[a-z][a-z0-9_-]{0,63}-[0-9a-f]{24}")
DEFAULT_CAPACITY_BYTES = 100 << 30  # setting dataset_cache_gb
DEFAULT_FETCH_TIMEOUT_SECONDS = 6 * 3600.0  # setting dataset_fetch_timeout_s
# The most entries a cache keeps (past it the least recently used unmounted go, as past the
# capacity): empty datasets take no room, yet each is files, folders and a metrics series.
MAX_ENTRIES = 1000
_COUNTERS = ("hits", "misses", "bytes_fetched", "evictions", "fetch_failures")


class NodeCache:
    """One node's cache at ``root``, of ``capacity`` bytes; a fetch may take ``timeout``
    seconds in all, and connect to the hosts ``allowed_hosts`` even where they resolve to
    loopback, link-local or this node's own addresses (``datafetch.refusal``)."""

    def __init__(self, root: str | os.PathLike[str], capacity: int, *,
                 timeout: float = DEFAULT_FETCH_TIMEOUT_SECONDS, allowed_hosts: tuple[str, ...] = ()) -> None:
        self.root = Path(root)
        self.capacity = capacity
        self.timeout, self.allowed_hosts = timeout, tuple(allowed_hosts)

    # -- the task's side: steps 1-6 -------------------------------------------------------

    def ensure(self, item: dict[str, Any], say: Callable[[str], None] = lambda _: None,
               pid: int | None = None, *, use: bool = True) -> Path:
        """The complete entry of ``item`` (a ``DatasetFetch`` as a dict), fetched unless the
        cache holds it, with process ``pid`` (default: this one, the task's) recorded as a
        task that uses it (``use=False``: a prefetch, which no task mounts yet)."""
        key = _checked_key(item["key"])
        self.make_dirs()
        entry = self.root / "entries" / key
        with self._locked(self.root / "locks" / f"{key}.lock"):  # 1
            for leftover in (self.root / "partial").glob(f"{key}.*"):  # 2
                shutil.rmtree(leftover, ignore_errors=True)
            if entry.is_dir():  # 3
                if use:  # a hit is a task that found its data (a prefetch finding it there is none)
                    self._count(hits=1)
                say(f"trainyard: dataset {item['name']} (version {item['version']}) is in this node's cache")
            else:  # 4
                started = time.monotonic()
                partial = self.root / "partial" / f"{key}.{os.getpid()}"
                os.mkdir(partial, 0o755)
                # Only a miss needs tarfile and urllib (tens of ms a task start would pay).
                from trainyard.backends import datafetch

                limit = datafetch.Limit(self.capacity, self.timeout, self.allowed_hosts)
                limit.make_room = lambda fetched: self.evict(keep=key, extra=fetched)
                limit.progress = lambda done: say(f"trainyard: fetching dataset {item['name']}: {done}")
                say(f"trainyard: fetching dataset {item['name']} (version {item['version']}) into this node's cache")
                try:
                    size, files = datafetch.fetch(item, partial, limit)
                except datafetch.FetchError as exc:
                    shutil.rmtree(partial, ignore_errors=True)
                    self._count(fetch_failures=1, bytes_fetched=limit.read)  # its bytes were read all the same
                    raise datafetch.FetchError(f"dataset {item['name']} (version {item['version']}): {exc}",
                                               transient=exc.transient) from None
                except BaseException:
                    shutil.rmtree(partial, ignore_errors=True)
                    raise
                if limit.left_out:
                    say(f"trainyard: dataset {item['name']}: {limit.left_out} entries of its folder were left out "
                        "(the dataset's owner may not read them)")
                meta = {"dataset": item["name"], "version": item["version"], "key": key, "size": size,
                        "files": files, "fetched_at": time.time()}
                _write_json(self.root / "meta" / f"{key}.json", meta)
                os.rename(partial, entry)
                self._count(misses=1, bytes_fetched=limit.read)  # as read from the source
                say(f"trainyard: dataset {item['name']} (version {item['version']}): fetched {limit.read} bytes in "
                    f"{time.monotonic() - started:.1f} s into this node's cache ({size} bytes, {files} files "
                    "unpacked)")
            if use:
                self._record_use(key, os.getpid() if pid is None else pid)  # 5
            with contextlib.suppress(FileNotFoundError):
                os.utime(self.root / "meta" / f"{key}.json")
        self.evict(keep=key)  # 6
        return entry

    def _record_use(self, key: str, pid: int) -> None:
        uses = self.root / "uses" / key
        uses.mkdir(mode=0o700, exist_ok=True)
        (uses / f"{pid}-{_start_time(pid)}").touch()

    def release(self, keys: list[str], pid: int) -> None:
        """Process ``pid`` no longer uses these entries (its task has ended; a use whose
        process is gone is dropped anyway, at the next read)."""
        for key in map(_checked_key, keys):
            for use in (self.root / "uses" / key).glob(f"{int(pid)}-*"):
                with contextlib.suppress(FileNotFoundError):
                    use.unlink()

    def evict(self, keep: str = "", extra: int = 0) -> list[str]:
        """Step 6: remove least recently used entries no task uses until the rest fit (with
        ``extra`` bytes of a fetch under way: room made while it fetches)."""
        evicted: list[str] = []
        self.make_dirs()
        with self._locked(self.root / "cache.lock"):
            entries = sorted(self._metas(), key=lambda m: m["last_used_at"] or 0.0)
            used = sum(m["size"] for m in entries) + extra
            count = len(entries)
            for meta in entries:
                if used <= self.capacity and count <= MAX_ENTRIES:
                    break
                key = meta["key"]
                if key == keep or self._in_use(key):
                    continue
                lock = self._try_lock(self.root / "locks" / f"{key}.lock")
                if lock is None:  # being fetched or mounted right now
                    continue
                try:
                    if self._in_use(key):
                        continue
                    gone = self.root / "partial" / f"{key}.evicted-{os.getpid()}"
                    with contextlib.suppress(FileNotFoundError):
                        os.rename(self.root / "entries" / key, gone)
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.root / "meta" / f"{key}.json")
                    shutil.rmtree(self.root / "uses" / key, ignore_errors=True)
                    shutil.rmtree(gone, ignore_errors=True)
                finally:
                    os.close(lock)
                used -= meta["size"]
                count -= 1
                evicted.append(key)
            if evicted:
                self._count_locked(evictions=len(evicted))
        return evicted

    # -- what the server shows --------------------------------------------------------------

    def read(self) -> dict[str, Any]:
        """Capacity, counters and entries (each with its live uses), as of now."""
        if self.root.exists() or self.root.is_symlink():
            self.check_root()  # it removes the uses of ended tasks: never in a folder a user shaped
        metas = list(self._metas())
        for meta in metas:
            meta["in_use"] = self._live_uses(meta["key"])
        return {"capacity": self.capacity, "used": sum(m["size"] for m in metas), **self._stats(),
                "entries": sorted(metas, key=lambda m: (m["dataset"], m["version"]))}

    def write_report(self, path: str | os.PathLike[str], **extra: Any) -> None:
        """``read``'s answer (with ``extra``) to ``path`` (a Slurm node's report to the
        server), whole, under the cache's lock: of two tasks that end at once, the later
        view is the one left, never an earlier one written over it."""
        if not (self.root.exists() or self.root.is_symlink()):  # no cache yet: nothing to lock
            _write_json(Path(path), {**self.read(), **extra})
            return
        self.check_root()  # the lock is made in it: never in a folder someone else may write
        with self._locked(self.root / "cache.lock"):
            _write_json(Path(path), {**self.read(), **extra})

    # -- internals ------------------------------------------------------------------------------

    def check_root(self) -> None:
        """PermissionError unless the root is a folder of this account's that only it may
        write: one a user made first (or a link in its place) would let them swap an entry,
        a lock, a use or a partial fetch under root, which reads, writes and removes there."""
        found = os.lstat(self.root)
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid() or found.st_mode & 0o022:
            # Made by someone else (a user who made the folder first, or a link in its place):
            # whoever may write it could swap an entry, a lock or a partial fetch under root.
            raise PermissionError(f"the dataset cache {self.root} is not a folder of this account's that only it "
                                  "may write: remove it, or set dataset_cache_dir to a folder of its own")
        self._check_above()

    def _check_above(self) -> None:
        """Nor may a folder above the root be someone else's to change (a user who made a
        shared disk's folder first, where a Slurm node makes the cache at its first fetch):
        they could put another folder, or a link, in the cache's place between two steps.
        Checked before the root is made, and whenever it is checked."""
        for above in (*self.root.parents, *Path(os.path.realpath(self.root)).parents):
            try:
                info = os.lstat(above)
            except FileNotFoundError:
                continue  # made below, by this account
            if info.st_uid not in (0, os.geteuid()) or (
                    not stat.S_ISLNK(info.st_mode) and info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX):
                raise PermissionError(f"the dataset cache {self.root} lies in {above}, which another account may "
                                      "change: set dataset_cache_dir to a folder whose every parent is root's (or "
                                      "this account's) alone")

    def make_dirs(self) -> None:
        """The cache's folders, the root checked (``check_root``; PermissionError), and the
        folders above it checked before it is made."""
        self._check_above()
        for above in reversed(self.root.parents):  # 0755 whatever the umask (a Slurm step's is the user's)
            if not above.exists():
                with contextlib.suppress(FileExistsError):
                    os.mkdir(above, 0o755)
        self.root.mkdir(exist_ok=True, mode=0o700)
        self.check_root()
        for name in ("entries", "meta", "locks", "uses", "partial"):
            (self.root / name).mkdir(exist_ok=True, mode=0o700)
        # The entries' folder must let the sandbox's bind reach an entry (as root) and a task
        # run as the server's own account read one; the root stays 0700.
        os.chmod(self.root / "entries", 0o711)

    def _metas(self) -> Iterator[dict[str, Any]]:
        for path in sorted((self.root / "meta").glob("*.json")) if (self.root / "meta").is_dir() else ():
            try:
                meta = json.loads(path.read_text())
                meta["last_used_at"] = path.stat().st_mtime
            except (OSError, ValueError):
                continue  # removed meanwhile, or half written by a fetch that died
            if isinstance(meta, dict) and KEY.fullmatch(str(meta.get("key"))):
                yield meta

    def _live_uses(self, key: str) -> int:
        uses = self.root / "uses" / key
        live = 0
        for use in uses.iterdir() if uses.is_dir() else ():
            pid, _, start = use.name.partition("-")
            if pid.isdigit() and start.isdigit() and int(start) != 0 and _start_time(int(pid)) == int(start):
                live += 1
            else:
                with contextlib.suppress(FileNotFoundError):
                    use.unlink()  # its task has ended
        return live

    def _in_use(self, key: str) -> bool:
        return self._live_uses(key) > 0

    def _stats(self) -> dict[str, int]:
        try:
            stats = json.loads((self.root / "stats.json").read_text())
        except (OSError, ValueError):
            stats = {}
        return {name: int(stats.get(name, 0)) for name in _COUNTERS}

    def _count(self, **changes: int) -> None:
        with self._locked(self.root / "cache.lock"):
            self._count_locked(**changes)

    def _count_locked(self, **changes: int) -> None:
        stats = self._stats()
        for name, change in changes.items():
            stats[name] += change
        _write_json(self.root / "stats.json", stats)

    @staticmethod
    @contextlib.contextmanager
    def _locked(path: Path) -> Iterator[None]:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    @staticmethod
    def _try_lock(path: Path) -> int | None:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd


# A task's status's reason (``TaskStatus.reason``) when its datasets could not be made ready:
# its message says why (``exitcodes.DATASET_UNAVAILABLE``, the same).
DATASET_UNAVAILABLE = "DATASET_UNAVAILABLE"
FAILED = "datasets.failed"  # in a task's folder: why its datasets could not be made ready (one line)
# Beside it when the failure may pass (``datafetch.FetchError.transient``): the task is then
# retried as a platform fault (LOST, a new attempt) instead of failing.
TRANSIENT = "datasets.transient"


def record_failure(task_dir: str, exc: BaseException, node: str = "") -> str:
    """Say in ``FAILED`` why a task's datasets could not be made ready (its status's message,
    read by the backend instead of the bare exit status), and return it: a ``FetchError``'s
    own words (which name the dataset), any other error's type and words."""
    from trainyard.backends import datafetch

    why = str(exc) if isinstance(exc, datafetch.FetchError) else f"its datasets: {type(exc).__name__}: {exc}"
    why = " ".join(f"{why}{f' (on node {node})' if node else ''}".split())[:1000]
    fd = os.open(os.path.join(task_dir, FAILED), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(why + "\n")
    if getattr(exc, "transient", False):
        os.close(os.open(os.path.join(task_dir, TRANSIENT), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                         0o600))
    return why


def failure(task_dir: str) -> tuple[str, bool] | None:
    """Why a task's datasets could not be made ready (``record_failure``), and whether it may
    pass; None if they could."""
    try:
        with open(os.path.join(task_dir, FAILED), encoding="utf-8", errors="replace") as f:
            why = f.read(4096).strip()  # record_failure writes at most 1000 characters
    except OSError:
        return None
    return (why, os.path.lexists(os.path.join(task_dir, TRANSIENT))) if why else None


def _checked_key(key: Any) -> str:
    if not isinstance(key, str) or not KEY.fullmatch(key):
        raise ValueError(f"not a cache key: {key!r}")
    return key


def _start_time(pid: int) -> int:
    """A process's start time in clock ticks since boot (0: no such process): with its pid,
    what names one process for good."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read()
    except OSError:
        return 0
    return int(text[text.rindex(b")") + 2:].split()[19])


def _write_json(path: Path, value: Any) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(value))
    os.replace(temporary, path)
