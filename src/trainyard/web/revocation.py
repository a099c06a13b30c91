"""Open connections end with the credential that opened them: the one mechanism that exec
(``routers/taskexec``), the job-port proxy's WebSockets, streamed answers and tunnels
(``routers/proxy``) and the session way in (``routers/sessions``, through the proxy's
``forward_*``) share.

A connection (a streamed answer too: a followed log, a proxied download) is opened with a
credential: a token (``token:<its SHA-256>``) or a portal
session's cookie (``cookie:<its SHA-256>``), the keys ``web.callers.credential_key`` makes. While it is
open it is ``watch``-ed: every ``RECHECK_SECONDS`` one loop asks the store, in one query
per kind, which of the credentials being watched still hold (a token not revoked, of a user
neither disabled nor deleted; a session not signed out, expired or idle, whose token, if it
signed in with one, is not revoked, of a user neither disabled nor deleted), and ends the
connections of those that do not. So a revocation, a password change, disabling or deleting
a user reaches every open connection within about ``RECHECK_SECONDS`` plus one query,
whichever server process made it, as long as it shares the store.

When the store cannot be asked (it is down), connections are kept and the loop tries again:
nothing can be revoked without the store either.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager

from fastapi.concurrency import run_in_threadpool

from trainyard.core.clock import Clock
from trainyard.services import web_sessions
from trainyard.store.db import Database

log = logging.getLogger(__name__)

RECHECK_SECONDS = 1.0
REVOKED_CLOSE_CODE = 4401  # a WebSocket closed because its credential no longer holds (HTTP's 401)
REVOKED_REASON = "the token or portal session that opened this was revoked or has ended"


class OpenConnections:
    """The open connections of one server, by credential; used from the event loop only."""

    def __init__(self, db: Database, clock: Clock, *, seconds: float = RECHECK_SECONDS) -> None:
        self._db = db
        self._clock = clock
        self._seconds = seconds
        self._open: dict[str, set[asyncio.Event]] = {}
        self._loop: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        return sum(len(events) for events in self._open.values())

    @asynccontextmanager
    async def watch(self, credential: str | None) -> AsyncIterator[asyncio.Event]:
        """An event set when ``credential`` no longer holds, for as long as the block runs.
        No credential: set at once (nothing vouches for the connection)."""
        ended = asyncio.Event()
        if credential is None:
            ended.set()
            yield ended
            return
        self._open.setdefault(credential, set()).add(ended)
        if self._loop is None or self._loop.done() or self._loop.get_loop() is not asyncio.get_running_loop():
            self._loop = asyncio.ensure_future(self._recheck())
        try:
            yield ended
        finally:
            events = self._open.get(credential)
            if events is not None:
                events.discard(ended)
                if not events:
                    del self._open[credential]

    async def _recheck(self) -> None:
        while self._open:
            await asyncio.sleep(self._seconds)
            keys = list(self._open)
            if not keys:
                return
            try:
                live = await run_in_threadpool(self._live, keys)
            except Exception:  # noqa: BLE001 - the store is down: keep what is open, ask again
                log.warning("could not check the credentials of %d open connections; trying again", len(keys),
                            exc_info=True)
                continue
            for key in keys:
                if key not in live:
                    for ended in self._open.get(key, ()):
                        ended.set()

    def _live(self, keys: Iterable[str]) -> set[str]:
        tokens = {key.removeprefix("token:") for key in keys if key.startswith("token:")}
        cookies = {key.removeprefix("cookie:") for key in keys if key.startswith("cookie:")}
        return web_sessions.live_credentials(self._db, tokens, cookies, clock=self._clock)


async def watched(connections: OpenConnections, credential: str | None,
                  chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``chunks`` for a streamed answer, until ``credential`` no longer holds."""
    async with connections.watch(credential) as ended:
        async for chunk in until_ended(chunks, ended):
            yield chunk


async def until_ended(chunks: AsyncIterator[bytes], ended: asyncio.Event) -> AsyncIterator[bytes]:
    """``chunks`` as they come, until ``ended`` is set: a streamed answer stops there."""
    stop = asyncio.ensure_future(ended.wait())
    try:
        while True:
            step = asyncio.ensure_future(anext(chunks))
            await asyncio.wait({step, stop}, return_when=asyncio.FIRST_COMPLETED)
            if not step.done():
                step.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await step
                return
            try:
                chunk = step.result()
            except StopAsyncIteration:
                return
            yield chunk
    finally:
        stop.cancel()


async def wait_ended(ended: asyncio.Event) -> None:
    """Returns once ``ended`` is set: one more "direction" for a pump of two."""
    await ended.wait()
