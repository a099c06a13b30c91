"""Every task's log of a job in one stream, each line marked with its task (``[worker/1] …``),
as ``kubectl logs --prefix`` shows pods: whole (task after task, each log as it is now) or
followed (lines from whichever task writes, as they come).

Only whole lines are sent, each with its prefix, so that lines of different tasks never mix
mid-line: a task's last line without its newline waits for it, unless the task has ended
(or, in a whole read, the log is read as it is now), when it is sent with one added. A line
longer than a page is the one exception: it is cut, each piece a line of its own.

A follower that polls (the portal) keeps a cursor: each task's byte offset, ``ROLE/INDEX:N``
joined by commas, as `merged_page` returns it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from functools import partial

import anyio
from anyio.to_thread import run_sync

from trainyard.backends.base import TaskKey
from trainyard.schemas.jobs import LOG_PAGE_BYTES
from trainyard.services.errors import Invalid
from trainyard.services.logs import FOLLOW_POLL_SECONDS, LogTarget, TaskLogs, find_log_targets, tail_offset
from trainyard.store.rows import UserRow

MIN_TASK_PAGE_BYTES = 4096  # the least a merged page reads of one task, however many tasks there are


def prefix_lines(label: str, data: bytes) -> bytes:
    """``data`` (whole lines; a last one without its newline gets one) with ``[label] ``
    before each line."""
    if not data:
        return b""
    prefix = f"[{label}] ".encode()
    body = data[:-1] if data.endswith(b"\n") else data
    return prefix + body.replace(b"\n", b"\n" + prefix) + b"\n"


def parse_cursor(cursor: str | None) -> dict[str, int]:
    """``ROLE/INDEX:N,…`` as a mapping; 422 on ``cursor`` if it is not one."""
    offsets: dict[str, int] = {}
    for part in (cursor or "").split(","):
        if not part:
            continue
        label, _, number = part.rpartition(":")
        if not label or not number.isascii() or not number.isdigit() or len(number) > 18:
            raise Invalid(f"cursor part {part!r} is not ROLE/INDEX:OFFSET; pass back the X-Log-Cursor header as given",
                          details=[{"path": "cursor", "message": "not ROLE/INDEX:OFFSET,…"}])
        offsets[label] = int(number)
    return offsets


def format_cursor(offsets: dict[str, int]) -> str:
    return ",".join(f"{label}:{offset}" for label, offset in offsets.items())


@dataclass(frozen=True)
class MergedPage:
    """What a merged read found: the prefixed lines, where each task's log goes on from, the
    attempt shown (None before any task ran), and whether every task has ended with its
    log read to the end (nothing more will come)."""

    data: bytes
    offsets: dict[str, int]
    attempt: int | None
    ended: bool


def find_all(logs: TaskLogs, user: UserRow, job_id: int, attempt: int | None) -> list[LogTarget]:
    return find_log_targets(logs.db, logs.specs, user, job_id, None, attempt)


def _whole_lines(data: bytes, at_end: bool, ended: bool, limit: int) -> bytes:
    """The part of a read to send: up to its last line's end; all of it once the task has
    ended and this reaches the log's end, or when one line fills the page."""
    if at_end and ended:
        return data
    cut = data.rfind(b"\n") + 1
    if cut:
        return data[:cut]
    return data if len(data) >= limit else b""


def merged_page(logs: TaskLogs, targets: list[LogTarget], offsets: dict[str, int] | None, *,
                tail: int | None = None, limit: int = LOG_PAGE_BYTES) -> MergedPage:
    """New whole lines of every task from ``offsets`` (a task not in it: from its start, or
    from its last ``tail`` lines), task after task, each prefixed; at most about ``limit``
    bytes of logs read in all, shared between the tasks."""
    per_task = max(MIN_TASK_PAGE_BYTES, limit // max(1, len(targets)))
    given = offsets or {}
    parts: list[bytes] = []
    moved: dict[str, int] = {}
    ended = True
    attempt = None
    for target in targets:
        label = target.label
        if target.key is None:
            ended = ended and target.ended
            moved[label] = 0
            continue
        attempt = target.key.attempt
        offset = given.get(label)
        if offset is None:
            offset = tail_offset(logs.backend, target.key, tail) if tail is not None else 0
        chunk = logs.backend.read_log(target.key, offset, per_task)
        if chunk.size < offset:  # re-run in place: a new log begins
            chunk = logs.backend.read_log(target.key, 0, per_task)
        at_end = chunk.offset + len(chunk.data) >= chunk.size
        sent = _whole_lines(chunk.data, at_end, target.ended, per_task)
        parts.append(prefix_lines(label, sent))
        moved[label] = chunk.offset + len(sent)
        ended = ended and target.ended and moved[label] >= chunk.size
    return MergedPage(b"".join(parts), moved, attempt, ended)


def whole_all(logs: TaskLogs, targets: list[LogTarget], tail: int | None = None,
              page_bytes: int = LOG_PAGE_BYTES) -> Iterator[bytes]:
    """Every task's log as it is now (or its last ``tail`` lines), task after task, each line
    prefixed; a page at a time, a log of any size."""
    for target in targets:
        if target.key is None:
            continue
        yield from _whole_task(logs, target.key, target.label, tail, page_bytes)


def _whole_task(logs: TaskLogs, key: TaskKey, label: str, tail: int | None, page_bytes: int) -> Iterator[bytes]:
    end = logs.backend.read_log(key, 0, 0).size
    offset = tail_offset(logs.backend, key, tail) if tail is not None else 0
    while offset < end:
        chunk = logs.backend.read_log(key, offset, min(page_bytes, end - offset))
        if not chunk.data:
            return  # shorter than it was (removed meanwhile): what there was is sent
        sent = _whole_lines(chunk.data, offset + len(chunk.data) >= end, True, page_bytes)
        yield prefix_lines(label, sent)
        offset += len(sent)


async def follow_all(logs: TaskLogs, user: UserRow, job_id: int, attempt: int | None,
                     tail: int | None = None) -> AsyncIterator[bytes]:
    """Every task's new lines as they are written, prefixed, until all tasks have ended and
    their logs are read (or the server is closing); a new attempt's logs once it begins."""
    offsets: dict[str, int] | None = None
    shown = None
    while not logs.closing.is_set():
        targets = await run_sync(find_all, logs, user, job_id, attempt)
        page = await run_sync(partial(merged_page, logs, targets, offsets, tail=tail))
        if shown is not None and page.attempt is not None and page.attempt != shown:
            offsets, tail = None, None  # a new attempt: its logs from their start
            shown = page.attempt
            continue
        shown = page.attempt if page.attempt is not None else shown
        offsets, tail = page.offsets, None
        if page.data:
            yield page.data
            continue
        if page.ended:
            return
        await anyio.sleep(FOLLOW_POLL_SECONDS)
