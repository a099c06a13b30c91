"""A job's files for its owner (or an admin): a folder's listing and a file to download,
under the job's directory or a task's working directory, with a log's access rules
(another user's job is "no such job"). The reading itself is ``backends/filewalk``'s,
whose rules keep a task's symlinks, FIFOs and hard links from steering the server's reads.

Where: without ``task``, the job's directory ($TRAINYARD_JOB_DIR, shared by its tasks and
kept across attempts); with ``task`` (``ROLE/INDEX``), that task's working directory in
``attempt`` (default: the latest, as for its log)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from trainyard.backends import filewalk
from trainyard.backends.base import Backend, TaskFiles
from trainyard.schemas.files import FileEntry, FileListing
from trainyard.services import jobs as job_service
from trainyard.services.errors import Conflict, Invalid, NotFound
from trainyard.services.logs import find_log_target
from trainyard.services.specs import StoredSpecs
from trainyard.store.db import Database
from trainyard.store.rows import UserRow

OpenFile = filewalk.OpenFile  # what a download reads from (web/downloads)
PREVIEW_BYTES = 64 << 10  # what the portal shows of a file as text


@dataclass(frozen=True)
class Place:
    """The directory a request means, once the caller may see it."""

    job_id: int
    task: str | None  # ROLE/INDEX, or None: the job's directory
    attempt: int | None
    root: Path

    @property
    def label(self) -> str:
        where = "directory" if self.task is None else f"task {self.task}'s working directory"
        attempt = "" if self.attempt is None else f" (attempt {self.attempt})"
        return f"job {self.job_id}'s {where}{attempt}"


class Unsatisfiable(Exception):
    """A Range the file cannot meet (416)."""


def find_place(db: Database, specs: StoredSpecs, backend: Backend, user: UserRow, job_id: int,
               task: str | None, attempt: int | None) -> Place:
    """Where ``user`` means, if they may see the job (else NotFound, as for any job of another user)."""
    if task is None:
        with db.session() as session:
            job_service.get_job(session, user, job_id)
        if attempt is not None:
            raise Invalid("`attempt` picks a task's working directory: give `task` (ROLE/INDEX) with it, or leave "
                          "`attempt` out for the job's directory",
                          details=[{"path": "attempt", "message": "needs task"}])
        return Place(job_id, None, None, _files(backend).job_dir(job_id))
    target = find_log_target(db, specs, user, job_id, task, attempt)
    if target.key is None:
        raise NotFound(f"task {target.label} of job {job_id} has not started, so it has no working directory yet")
    return Place(job_id, target.label, target.key.attempt, _files(backend).work_dir(target.key))


def _files(backend: Backend) -> TaskFiles:
    if not isinstance(backend, TaskFiles):
        raise Conflict(f"the {backend.name} backend keeps no job files this server can read")
    return backend


def list_files(place: Place, path: str) -> FileListing:
    """The folder ``path`` of the place: its entries, sorted by name, at most ``filewalk.MAX_ENTRIES``."""
    names = _names(path)
    try:
        listing = filewalk.list_dir(place.root, names)
    except (filewalk.NotThere, filewalk.Refused) as exc:
        raise _refusal(place, names, exc) from exc
    entries = [FileEntry(name=e.name, type=e.kind, size=e.size, modifiedAt=_time(e.modified), target=e.target)  # type: ignore[arg-type]
               for e in listing.entries]
    return FileListing(job=place.job_id, task=place.task, attempt=place.attempt, path="/".join(names),
                       entries=entries, truncated=listing.truncated, omitted=listing.omitted)


def open_file(place: Place, path: str) -> filewalk.OpenFile:
    """The regular file ``path`` of the place, open for reading (the caller closes it)."""
    names = _names(path)
    if not names:
        raise Invalid("give the file's path (`path`): the directory itself is listed, not downloaded",
                      details=[{"path": "path", "message": "a file's path is needed"}])
    try:
        return filewalk.open_file(place.root, names)
    except (filewalk.NotThere, filewalk.Refused) as exc:
        raise _refusal(place, names, exc) from exc


def preview(place: Place, path: str, limit: int = PREVIEW_BYTES) -> tuple[bytes, int]:
    """The first ``limit`` bytes of a file and its size."""
    opened = open_file(place, path)
    try:
        return opened.read(limit), opened.size
    finally:
        opened.close()


def _position(text: str) -> bool:
    """Whether ``text`` is a byte position as a range writes one: ASCII digits, at most 19
    (a file's size fits in them; ``int`` of 5,000 digits raises)."""
    return text.isascii() and text.isdigit() and len(text) <= 19


def byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The one byte range (start, end exclusive) a ``Range`` header asks of a file of ``size``
    bytes; None to send it whole (no header, another unit, several ranges, or one that does
    not parse: RFC 9110 lets a server ignore those); Unsatisfiable when it starts past the end."""
    if header is None:
        return None
    unit, _, spec = header.strip().partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    if not dash or first == last == "" or not all(_position(n) for n in (first, last) if n):
        return None
    if first == "":  # the last N bytes
        suffix = int(last)
        if suffix == 0 or size == 0:
            raise Unsatisfiable
        return max(0, size - suffix), size
    start = int(first)
    end = size if last == "" else min(int(last) + 1, size)
    if last != "" and int(last) < start:
        return None
    if start >= size:
        raise Unsatisfiable
    return start, end


def _names(path: str) -> list[str]:
    try:
        return filewalk.split_path(path)
    except filewalk.BadPath as exc:
        raise Invalid(f"{exc}", details=[{"path": "path", "message": str(exc)}]) from exc


def _refusal(place: Place, names: list[str], exc: Exception) -> Exception:
    shown = "/".join(names)
    if isinstance(exc, filewalk.NotThere):
        if not names or not place.root.exists():
            when = "yet, or any more" if place.task is None else "any more"
            return NotFound(f"{place.label} does not exist ({when})")
        return NotFound(f"no {shown!r} in {place.label}")
    reason = str(exc)
    if not names:
        reason = f"the directory itself {reason}"
    return Invalid(f"{reason} (in {place.label})", details=[{"path": "path", "message": reason}])


def _time(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
