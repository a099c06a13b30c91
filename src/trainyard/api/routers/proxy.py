"""Into a running task's ports through ``yard up``: an HTTP and WebSocket reverse proxy at
``/proxy/jobs/{id}/{role}/{index}/{port}/…`` (a browser opens it with the portal's session),
and a TCP tunnel over a WebSocket for ``yard port-forward``.

Who may reach which port is ``services/task_access``'s rule: only a port the task was
allocated (its ``resourcePerInstance.ports``), only the job's owner and admins with a token;
anyone else is answered 404, as for a job that does not exist. docs/security.md says why
admins' browser sessions do not.
Nothing is sent on a connection to the port until the backend has said the task's own
processes took it (``services/taskports``, ``PortOwners``); otherwise 502.

Who may reach what is asked of the store once per credential, job, task and port every
``GRANT_SECONDS`` (3 s), not on every request: a browser loads a web app's page as a
hundred requests or so, and the queries of each check (the session, the job, the task, the
node's address) were more than half of the server's CPU per request (benchmarks/
bench_proxy.py, docs/benchmarks.md "The port proxy": 5-8 ms a request before, 3 ms with
the cache). Only a check that let a request through is kept, in ``task_access.Grants``; a refusal
is asked again. So a sign-out, a revoked token or a job that stops takes up to that long
to close the proxy to a caller that was already getting through (a stopped task's port
answers nothing by then anyway).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Coroutine
from typing import Annotated, Any

import httpx
from fastapi import APIRouter, Path, Request, WebSocket
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response, StreamingResponse
from starlette.background import BackgroundTask
from starlette.datastructures import Headers
from starlette.websockets import WebSocketDisconnect
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from trainyard.api.taskaccess import admit, deny, note_use, refusal
from trainyard.services.task_access import Refused, Target, port_target
from trainyard.services.taskports import NotTheTasks, checked_async_transport, expected, open_checked
from trainyard.web.bodies import MAX_ID
from trainyard.web.callers import COOKIE, credential_key, same_origin, sign_in_url
from trainyard.web.context import AppContext, context_of
from trainyard.web.revocation import REVOKED_CLOSE_CODE, REVOKED_REASON, wait_ended, watched

log = logging.getLogger(__name__)

router = APIRouter()

PREFIX = "/proxy/jobs"
CHUNK = 65536
# Connection-level headers (RFC 9110 7.6.1) and what the proxy sets itself.
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "transfer-encoding", "upgrade", "proxy-connection",
})

JobId = Annotated[int, Path(ge=1, le=MAX_ID)]
Index = Annotated[int, Path(ge=0, le=100_000)]
Port = Annotated[int, Path(ge=1, le=65535)]


async def _resolve(ctx: AppContext, headers: Headers, cookies: dict[str, str], job_id: int, role: str,
                   index: int, port: int, how: str, *, unsafe: bool, origin_ok: bool) -> Target:
    admitted = await admit(ctx, headers, cookies, job_id, role, index, port, unsafe=unsafe, origin_ok=origin_ok)
    target = admitted.target
    if target is None:
        target = await run_in_threadpool(port_target, ctx.db, ctx.backend, admitted.caller, job_id, role, index, port)
        ctx.grants.keep(admitted.key, admitted.caller, target)
    await note_use(ctx, admitted.caller, job_id, role, index, port, how)
    return target


def _forwarded_headers(headers: Headers, client_host: str, scheme: str, prefix: str) -> list[tuple[str, str]]:
    """The request's headers, less hop-by-hop ones and Trainyard's own credentials: the task
    never sees its user's token or portal session."""
    out = []
    for name, value in headers.items():
        lower = name.lower()
        if lower in HOP_BY_HOP or lower == "authorization" or lower.startswith("sec-websocket"):
            continue
        if lower == "cookie":
            kept = "; ".join(c for c in (p.strip() for p in value.split(";")) if c and not c.startswith(COOKIE + "="))
            if not kept:
                continue
            value = kept
        out.append((name, value))
    out += [("X-Forwarded-For", client_host), ("X-Forwarded-Proto", scheme),
            ("X-Forwarded-Host", headers.get("host", "")), ("X-Forwarded-Prefix", prefix)]
    return out


def _rest(raw_path: bytes) -> str:
    """What follows ``/proxy/jobs/ID/ROLE/I/PORT`` in the path as sent (still %-encoded)."""
    parts = raw_path.decode("latin-1").split("/", 7)
    return "/" + (parts[7] if len(parts) > 7 else "")


def _location(value: str, target: Target, prefix: str) -> str:
    for origin in (f"http://{target.host}:{target.port}", f"http://127.0.0.1:{target.port}",
                   f"http://localhost:{target.port}"):
        if value.startswith(origin + "/") or value == origin:
            return prefix + (value[len(origin):] or "/")
    if value.startswith("/") and not value.startswith("//") and not value.startswith(prefix + "/"):
        return prefix + value
    return value


def _refusal_to(request: Request, exc: Refused) -> Response:
    """JSON for a program; for a browser (no token, and it asks for HTML), the portal's own
    page with the same status, and the sign-in form first for a signed-out GET."""
    if "authorization" in request.headers or "text/html" not in request.headers.get("accept", ""):
        return refusal(exc)
    if exc.status == 401 and request.method == "GET":
        query = f"?{request.url.query}" if request.url.query else ""
        return RedirectResponse(sign_in_url(request.url.path + query), status_code=303)
    page = context_of(request).error_page
    return page(request, exc.status, exc.message, exc.retry_after) if page is not None else refusal(exc)


def _client(request: Request) -> httpx.AsyncClient:
    ctx = context_of(request)
    client = ctx.proxy_client
    if client is None:
        # No pool limits to speak of and no timeout on reading: a kernel's reply or a
        # download may take as long as it takes; connecting may not.
        # Each new connection is checked to be the task's before a byte goes out on it
        # (``services/taskports``), and a kept one carries requests for that task alone.
        transport = checked_async_transport(
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=20), trust_env=False)
        client = httpx.AsyncClient(timeout=httpx.Timeout(None, connect=10.0), follow_redirects=False,
                                   transport=transport, trust_env=False)
        ctx.proxy_client = client
    return client


@router.api_route("/proxy/jobs/{job_id}/{role}/{index}/{port}", include_in_schema=False,
                  methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
async def proxy_root(job_id: JobId, role: str, index: Index, port: Port, request: Request) -> Response:
    """The bare prefix: a page's relative links need the trailing slash."""
    query = f"?{request.url.query}" if request.url.query else ""
    return RedirectResponse(f"{PREFIX}/{job_id}/{role}/{index}/{port}/{query}", status_code=307)


@router.api_route("/proxy/jobs/{job_id}/{role}/{index}/{port}/{path:path}", include_in_schema=False,
                  methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
async def proxy_http(job_id: JobId, role: str, index: Index, port: Port, path: str, request: Request) -> Response:
    prefix = f"{PREFIX}/{job_id}/{role}/{index}/{port}"
    unsafe = request.method not in ("GET", "HEAD", "OPTIONS")
    try:
        target = await _resolve(context_of(request), request.headers, dict(request.cookies), job_id, role, index, port,
                                "the proxy", unsafe=unsafe, origin_ok=same_origin(request))
    except Refused as exc:
        return _refusal_to(request, exc)
    return await forward_http(request, target, _rest(request.scope.get("raw_path") or b""), prefix,
                              f"task {role}/{index} of job {job_id}")


async def forward_http(request: Request, target: Target, path: str, prefix: str, what: str,
                       extra_headers: tuple[tuple[str, str], ...] = (), starting: str | None = None,
                       starting_retry: int = 2) -> Response:
    """``request`` to ``path`` (as sent, %-encoded) on ``target``, its answer streamed back;
    ``prefix`` is where the target appears on this server (for its redirects). ``starting``:
    the target is a server its task is still starting (a session's JupyterLab), so a refused
    connection means "not yet": 503 with that message and a retry after ``starting_retry``
    seconds, rather than 502."""
    query = f"?{request.url.query}" if request.url.query else ""
    url = f"http://{_host(target.host)}:{target.port}{path}{query}"
    headers = _forwarded_headers(request.headers, request.client.host if request.client else "",
                                 request.url.scheme, prefix) + list(extra_headers)
    client = _client(request)
    has_body = "content-length" in request.headers or "transfer-encoding" in request.headers
    upstream_request = client.build_request(request.method, url, headers=headers,
                                            content=request.stream() if has_body else None)
    checking = expected.set(target.owner)
    try:
        upstream = await client.send(upstream_request, stream=True)
    except httpx.ConnectError as exc:
        if isinstance(exc.__cause__, NotTheTasks):
            return _refusal_to(request, Refused(502, f"{what}: {exc.__cause__}"))
        if starting is None:
            return _refusal_to(request, Refused(502, f"{what} did not answer on port {target.port}: "
                                                     f"{type(exc).__name__} {exc}".rstrip()))
        return _refusal_to(request, Refused(503, f"{starting} ({type(exc).__name__} on port {target.port})",
                                            retry_after=starting_retry))
    except httpx.HTTPError as exc:
        return _refusal_to(request, Refused(502, f"{what} did not answer on port {target.port}: "
                                                 f"{type(exc).__name__} {exc}".rstrip()))
    finally:
        expected.reset(checking)
    credential = credential_key(request.headers, dict(request.cookies))
    response = StreamingResponse(_watched_body(context_of(request), credential, upstream, what,
                                               target.port),
                                 status_code=upstream.status_code, background=BackgroundTask(upstream.aclose))
    raw = []
    for name, value in upstream.headers.multi_items():
        lower = name.lower()
        if lower in HOP_BY_HOP:
            continue
        if lower == "location":
            value = _location(value, target, prefix)
        raw.append((lower.encode("latin-1"), value.encode("latin-1", "replace")))
    response.raw_headers = raw
    return response


async def _body(upstream: httpx.Response, what: str, port: int) -> AsyncIterator[bytes]:
    """The task's answer as it comes; if the task breaks off mid-answer the client's answer
    ends there too (its length then falls short, which is how an HTTP proxy says so)."""
    try:
        async for chunk in upstream.aiter_raw(CHUNK):
            yield chunk
    except httpx.HTTPError as exc:
        log.warning("%s port %s broke off its answer: %s", what, port, exc)


async def _watched_body(ctx: AppContext, credential: str | None, upstream: httpx.Response, what: str,
                        port: int) -> AsyncIterator[bytes]:
    """``_body``, ended when the credential the request came with no longer holds: a long
    answer (a download, a stream of events) does not outlive a revocation."""
    async for chunk in watched(ctx.connections, credential, _body(upstream, what, port)):
        yield chunk


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@router.websocket("/proxy/jobs/{job_id}/{role}/{index}/{port}/{path:path}")
async def proxy_websocket(websocket: WebSocket, job_id: int, role: str, index: int, port: int, path: str) -> None:
    prefix = f"{PREFIX}/{job_id}/{role}/{index}/{port}"
    # Browsers send cookies with a WebSocket handshake from any site: it must come from ours.
    origin_ok = same_origin(websocket)
    try:
        if not (1 <= job_id <= MAX_ID and 0 <= index and 1 <= port <= 65535):
            raise Refused(404, "there is no such page")
        target = await _resolve(context_of(websocket), websocket.headers, dict(websocket.cookies), job_id, role,
                                index, port, "the proxy", unsafe=True, origin_ok=origin_ok)
    except Refused as exc:
        await deny(websocket, exc)
        return
    await forward_websocket(websocket, target, _rest(websocket.scope.get("raw_path") or b""), prefix,
                            f"task {role}/{index} of job {job_id}")


async def forward_websocket(websocket: WebSocket, target: Target, path: str, prefix: str, what: str,
                            extra_headers: tuple[tuple[str, str], ...] = ()) -> None:
    """Accept ``websocket`` once ``target`` has accepted one at ``path``, then carry the
    frames both ways until either side closes."""
    query = f"?{websocket.url.query}" if websocket.url.query else ""
    url = f"ws://{_host(target.host)}:{target.port}{path}{query}"
    headers = [(k, v) for k, v in _forwarded_headers(
        websocket.headers, websocket.client.host if websocket.client else "", websocket.url.scheme, prefix)
        if k.lower() not in ("host", "origin")] + list(extra_headers)
    offered = [p.strip() for p in websocket.headers.get("sec-websocket-protocol", "").split(",") if p.strip()]
    try:
        # Connected, and checked to be the task's, before the handshake carries anything.
        sock = await run_in_threadpool(open_checked, target.host, target.port, target.owner, 10.0)
    except NotTheTasks as exc:
        await deny(websocket, Refused(502, f"{what}: {exc}"))
        return
    except OSError as exc:
        await deny(websocket, Refused(502, f"{what} did not accept a WebSocket on port {target.port}: {exc}"))
        return
    sock.setblocking(False)
    try:
        upstream = await ws_connect(url, additional_headers=headers, subprotocols=offered or None,  # type: ignore[arg-type]
                                    max_size=None, open_timeout=10, compression=None, sock=sock)
    except (OSError, InvalidHandshake, InvalidURI, TimeoutError) as exc:
        sock.close()
        await deny(websocket, Refused(502, f"{what} did not accept a WebSocket on port {target.port}: {exc}"))
        return
    await websocket.accept(subprotocol=upstream.subprotocol)
    ctx = context_of(websocket)
    async with ctx.connections.watch(credential_key(websocket.headers, dict(websocket.cookies))) as ended:
        await _carry_websocket(websocket, upstream, ended)


async def _carry_websocket(websocket: WebSocket, upstream: Any, ended: asyncio.Event) -> None:
    """Frames both ways until either side closes, or the credential that opened it no longer
    holds (then closed with ``REVOKED_CLOSE_CODE``)."""

    async def downstream_to_upstream() -> None:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            if message.get("bytes") is not None:
                await upstream.send(message["bytes"])
            elif message.get("text") is not None:
                await upstream.send(message["text"])

    async def upstream_to_downstream() -> None:
        async for data in upstream:
            if isinstance(data, bytes):
                await websocket.send_bytes(data)
            else:
                await websocket.send_text(data)

    await _pump(downstream_to_upstream(), upstream_to_downstream(), wait_ended(ended))
    await upstream.close()
    with contextlib.suppress(RuntimeError, WebSocketDisconnect):
        if ended.is_set():
            await websocket.close(code=REVOKED_CLOSE_CODE, reason=REVOKED_REASON[:120])
        else:
            await websocket.close()


async def _pump(*directions: Coroutine[Any, Any, None]) -> None:
    """Run both directions until either ends (a side closed), then stop the other."""
    tasks = [asyncio.ensure_future(d) for d in directions]
    _, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task in pending:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, ConnectionClosed, WebSocketDisconnect, OSError,
                                 RuntimeError):
            await task


@router.websocket("/api/v1/jobs/{job_id}/tasks/{role}/{index}/ports/{port}/tunnel")
async def tunnel(websocket: WebSocket, job_id: int, role: str, index: int, port: int) -> None:
    """One TCP connection to the task's port, its bytes carried in binary frames both ways."""
    try:
        if not (1 <= job_id <= MAX_ID and 0 <= index and 1 <= port <= 65535):
            raise Refused(404, "there is no such tunnel")
        target = await _resolve(context_of(websocket), websocket.headers, dict(websocket.cookies), job_id, role,
                                index, port, "a port-forward", unsafe=True,
                                origin_ok=same_origin(websocket))
    except Refused as exc:
        await deny(websocket, exc)
        return
    try:
        sock = await run_in_threadpool(open_checked, target.host, target.port, target.owner, 10.0)
        sock.setblocking(False)
        reader, writer = await asyncio.wait_for(asyncio.open_connection(sock=sock), 10)
    except NotTheTasks as exc:
        await deny(websocket, Refused(502, f"task {role}/{index} of job {job_id}: {exc}"))
        return
    except (OSError, TimeoutError) as exc:
        await deny(websocket, Refused(502, f"task {role}/{index} of job {job_id} did not accept a connection "
                                            f"on port {port}: {exc}"))
        return
    await websocket.accept()
    ctx = context_of(websocket)
    async with ctx.connections.watch(credential_key(websocket.headers, dict(websocket.cookies))) as ended:
        await _carry_tunnel(websocket, reader, writer, ended)


async def _carry_tunnel(websocket: WebSocket, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        ended: asyncio.Event) -> None:
    """The TCP connection's bytes both ways until either side closes, or the credential that
    opened it no longer holds (then closed with ``REVOKED_CLOSE_CODE``)."""

    async def to_task() -> None:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                return
            data = message.get("bytes") or (message.get("text") or "").encode()
            writer.write(data)
            await writer.drain()

    async def from_task() -> None:
        while data := await reader.read(CHUNK):
            await websocket.send_bytes(data)

    await _pump(to_task(), from_task(), wait_ended(ended))
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    with contextlib.suppress(RuntimeError, WebSocketDisconnect):
        if ended.is_set():
            await websocket.close(code=REVOKED_CLOSE_CODE, reason=REVOKED_REASON[:120])
        else:
            await websocket.close()
