"""Working directories sent with jobs: received, checked, stored once per content, and used.

An upload is read as ``core.workdirs`` reads it — member by member, never extracted — and
stored as the gzip of its canonical tar under ``<root>/<hex>.tar.gz`` (0600, a folder only
the server reads), once per content: a second owner sending the same folder, or the same
owner again, adds a row and no file. A job may run in an upload of its owner's only (an
admin may name anyone's: a clone of their job); another user's digest is "no such upload",
whether or not it exists. Uploads no job runs in are forgotten after a day, and an archive
no row holds any more is removed (``sweep``); a job's upload stays while the job waits or
runs, and a week after it ended (so that it can be cloned). One user's uploads together hold
at most ``user_max_bytes``.
"""

from __future__ import annotations

import logging
import os
import stat
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import IO, TYPE_CHECKING

from sqlalchemy.orm import Session

from trainyard.core.clock import Clock
from trainyard.core.workdirs import HASH_PREFIX, Canonical, WorkdirError, is_digest, read_archive, size_text
from trainyard.schemas.workdirs import WorkdirView
from trainyard.services.errors import Invalid, NotFound, TooMany
from trainyard.store.queries import workdirs as workdir_queries
from trainyard.store.rows import UserRow, WorkdirRow

if TYPE_CHECKING:
    from trainyard.services.server import Server

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 64 << 20
DEFAULT_USER_MAX_BYTES = 1 << 30
UNUSED_KEEP = timedelta(days=1)  # an upload waits this long for the job that will run in it
ENDED_KEEP = timedelta(days=7)  # and is kept this long after the last job in it ended (for a clone)


@dataclass(frozen=True)
class WorkdirStore:
    """Where the archives are, and how big a working directory may be (unpacked)."""

    root: Path
    max_bytes: int = DEFAULT_MAX_BYTES
    user_max_bytes: int = DEFAULT_USER_MAX_BYTES  # what one user's uploads may hold together

    def path(self, digest: str) -> Path:
        if not is_digest(digest):
            raise ValueError(f"not a working directory's digest: {digest!r}")
        return self.root / f"{digest.removeprefix(HASH_PREFIX)}.tar.gz"

    def keep(self, archive: Canonical) -> Path:
        """Write the archive unless it is there already (atomically: whole or absent)."""
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        target = self.path(archive.digest)
        if target.exists():
            os.utime(target)  # sent again: young again, so that `sweep` leaves it while its row is written
        else:
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".upload-")
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(archive.gzipped())
                os.replace(tmp, target)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        return target

    def remove_except(self, digests: set[str], *, settled_seconds: float = 3600.0) -> int:
        """Remove every archive whose digest is not in ``digests`` and that nobody sent in
        the last ``settled_seconds`` (one being received has no row yet); how many went."""
        removed = 0
        settled = time.time() - settled_seconds
        keep = {d.removeprefix(HASH_PREFIX) for d in digests}
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return 0
        for name in names:
            path = self.root / name
            try:
                info = path.lstat()
                if not stat.S_ISREG(info.st_mode) or info.st_mtime > settled:
                    continue  # not ours to remove, or sent again a moment ago
                if name.startswith(".upload-") or name.removesuffix(".tar.gz") not in keep:
                    path.unlink()
                    removed += 1
            except OSError as exc:  # one bad entry must not stop the sweep
                log.warning("working directories: cannot remove %s: %s", path, exc)
        return removed


def view(row: WorkdirRow) -> WorkdirView:
    return WorkdirView(digest=row.digest, sizeBytes=row.size_bytes, files=row.files, createdAt=row.created_at)


def receive(session: Session, owner: UserRow, stream: IO[bytes], store: WorkdirStore, clock: Clock) -> WorkdirView:
    """Check an uploaded archive, keep it, and make it ``owner``'s; 422 naming the member
    (and the biggest files, when too big) for one that cannot be a working directory."""
    try:
        archive = read_archive(stream, max_bytes=store.max_bytes)
    except WorkdirError as exc:
        details = [{"path": f"<archive>/{exc.member}" if exc.member else "<archive>", "message": str(exc)}]
        details += [{"path": f"<archive>/{name}", "message": f"{size} bytes"} for name, size in exc.biggest]
        raise Invalid(f"the working directory cannot be used: {exc}", details=details) from None
    row = workdir_queries.owned(session, owner.id, archive.digest)
    if row is None and (held := workdir_queries.bytes_held(session, owner.id)) + archive.size > store.user_max_bytes:
        raise TooMany(f"{owner.name} keeps {size_text(held)} of working directories and this one is "
                      f"{size_text(archive.size)} more, past this cluster's {size_text(store.user_max_bytes)} per user "
                      "(workdir_user_max_mb); one goes a day after it was sent if no job runs in it, and a week "
                      "after the last job in it ended", details=[{"path": "<archive>", "message": "past the limit"}])
    store.keep(archive)
    if row is not None:
        row.created_at = clock.now()  # sent again: kept again from now
    else:
        row = WorkdirRow(owner_id=owner.id, digest=archive.digest, size_bytes=archive.size, files=archive.files,
                         created_at=clock.now())
        session.add(row)
        session.flush()
    return view(row)


def describe(session: Session, viewer: UserRow, digest: str, store: WorkdirStore, clock: Clock) -> WorkdirView:
    """``viewer``'s upload of this content (404 if they have none, or its archive is gone).
    A client asks this before it submits instead of sending the folder again: the upload is
    kept again from now, so that the sweep leaves it until the job comes."""
    row = usable(session, viewer, digest, path="digest", store=store)
    row.created_at = clock.now()
    os.utime(store.path(digest))
    return view(row)


def usable(session: Session, user: UserRow, digest: str, *, path: str = "workdir", clock: Clock | None = None,
           store: WorkdirStore | None = None) -> WorkdirRow:
    """The upload ``user`` may run a job in: their own; an admin, anyone's (recorded as the
    admin's too, with ``clock``, so that it stays while their job does)."""
    if not is_digest(digest):
        raise Invalid(f"{path}: {digest!r} is not an upload's digest (sha256:<64 hex digits>); `yard submit` "
                      "sends the folder a job file's workdir names, or PUT its archive to /api/v1/workdirs",
                      details=[{"path": path, "message": "not sha256:<hex>"}])
    row = workdir_queries.owned(session, user.id, digest)
    if row is None and user.is_admin and (other := workdir_queries.by_digest(session, digest)) is not None:
        row = other
        if clock is not None:
            row = WorkdirRow(owner_id=user.id, digest=digest, size_bytes=other.size_bytes, files=other.files,
                             created_at=clock.now())
            session.add(row)
            session.flush()
    if row is None or (store is not None and not store.path(digest).exists()):
        raise NotFound(f"{path}: no working directory {digest} of yours; send it again (`yard submit` does)",
                       details=[{"path": path, "message": "no such upload"}])
    return row


def sweep(session: Session, store: WorkdirStore, clock: Clock) -> int:
    """Forget uploads no job runs in after a day (a week after the last job in one ended),
    and remove archives no upload holds."""
    now = clock.now()
    workdir_queries.forget_unused(session, now - UNUSED_KEEP, ended_before=now - ENDED_KEEP)
    return store.remove_except(workdir_queries.digests_in_use(session))


def upload(server: Server, user: UserRow, stream: IO[bytes]) -> WorkdirView:
    """``PUT /workdirs``: `receive` in a unit of work of its own."""
    with server.db.session() as session:
        return receive(session, user, stream, server.workdirs, server.clock)


def shown(server: Server, user: UserRow, digest: str) -> WorkdirView:
    """``GET /workdirs/{digest}``: `describe`."""
    with server.db.session() as session:
        return describe(session, user, digest, server.workdirs, server.clock)
