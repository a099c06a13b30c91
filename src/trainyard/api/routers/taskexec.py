"""``yard exec``, ``yard shell`` and the portal's terminal: a command run inside a running
task, its bytes carried over one WebSocket at ``/api/v1/jobs/{id}/tasks/{role}/{index}/exec``.

The protocol (docs/security.md says who may use it; ``services/task_access`` decides):

1. The handshake carries the caller's token (``Authorization: Bearer``) or, from the
   portal's own pages only (same origin), its session cookie. A refusal is the handshake's
   HTTP answer: 401, 403, 404 (not the caller's job, or no such running task), 409 (the
   job does not run).
2. The client's first frame is text, JSON: ``{"argv": [...], "tty": bool, "rows": R,
   "cols": C}``. An empty ``argv`` asks for the task's shell (``SHELL_COMMAND``); ``tty``
   gives the command a terminal of ``rows`` × ``cols``.
3. Then the client sends binary frames (the command's stdin, raw bytes) and text frames:
   ``{"resize": {"rows": R, "cols": C}}``, ``{"eof": true}`` (stdin ends; without a
   terminal), ``{"signal": "INT"}`` (or TERM, HUP, QUIT, KILL: for the command's process
   group).
4. The server sends binary frames, each a channel byte (1 stdout, 2 stderr; with a
   terminal always 1) then the bytes, and at the end one text frame ``{"exit": CODE}``
   (128 + N when signal N killed it), then closes (1000). When the command cannot be run,
   it sends ``{"error": MESSAGE}`` instead and closes with 4400 (bad first frame), 4409
   (the task cannot be reached now) or 1011; and when the token or portal session that
   opened it is revoked or ends (``web/revocation.py``: within about a second), the
   command is hung up and it closes with 4401.

A client that goes away hangs the command up (SIGHUP, SIGKILL after a grace). Every
command is an event on the job (``exec``): who ran what in which task.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shlex
import signal
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, WebSocket
from fastapi.concurrency import run_in_threadpool
from starlette.websockets import WebSocketDisconnect

from trainyard.api.execprocess import ExecProcess
from trainyard.api.taskaccess import deny
from trainyard.backends.base import SHELL_COMMAND, ExecError, ExecPlan, TaskExec
from trainyard.services.task_access import Caller, Refused, RunningTask, record_exec, running_task
from trainyard.web.bodies import MAX_ID
from trainyard.web.callers import identify_caller, same_origin
from trainyard.web.context import AppContext, context_of
from trainyard.web.revocation import REVOKED_CLOSE_CODE, REVOKED_REASON

log = logging.getLogger(__name__)

router = APIRouter()

MAX_ARGS = 4096
MAX_ARGV_BYTES = 128 * 1024
MAX_TERMINAL_SIDE = 10_000
SHOWN_COMMAND_CHARS = 200  # of the command, in the job's event
SIGNALS = {"INT": signal.SIGINT, "TERM": signal.SIGTERM, "HUP": signal.SIGHUP, "QUIT": signal.SIGQUIT,
           "KILL": signal.SIGKILL}
BAD_REQUEST, UNREACHABLE, SERVER_ERROR = 4400, 4409, 1011


@dataclass(frozen=True)
class ExecRequest:
    """The client's first frame."""

    argv: tuple[str, ...]
    tty: bool
    rows: int
    cols: int

    @classmethod
    def parse(cls, text: str) -> ExecRequest:
        """ValueError with a message the client can act on."""
        try:
            body = json.loads(text)
        except ValueError:
            raise ValueError("the first frame must be JSON: {\"argv\": [...], \"tty\": false}") from None
        if not isinstance(body, dict):
            raise ValueError("the first frame must be a JSON object: {\"argv\": [...], \"tty\": false}")
        if unknown := sorted(set(body) - {"argv", "tty", "rows", "cols"}):
            raise ValueError(f"unknown field(s) in the first frame: {', '.join(map(str, unknown))}")
        argv = body.get("argv", [])
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise ValueError("argv must be a list of strings (empty: the task's shell)")
        if len(argv) > MAX_ARGS or sum(len(a.encode("utf-8", "surrogatepass")) + 1 for a in argv) > MAX_ARGV_BYTES:
            raise ValueError(f"argv is too long (at most {MAX_ARGS} arguments, {MAX_ARGV_BYTES} bytes)")
        if any("\0" in a for a in argv):
            raise ValueError("an argument of argv contains a NUL byte")
        tty = body.get("tty", False)
        if not isinstance(tty, bool):
            raise ValueError("tty must be true or false")
        rows, cols = _side(body, "rows", 24), _side(body, "cols", 80)
        return cls(tuple(argv), tty, rows, cols)

    def describe(self, user: str, role: str, index: int) -> str:
        """The job event's words."""
        if not self.argv:
            return f"{user} opened a shell in task {role}/{index}"
        shown = shlex.join(self.argv)
        if len(shown) > SHOWN_COMMAND_CHARS:
            shown = shown[:SHOWN_COMMAND_CHARS - 1] + "…"
        terminal = " (with a terminal)" if self.tty else ""
        return f"{user} ran `{shown}` in task {role}/{index}{terminal}"


def _side(body: dict[str, Any], name: str, default: int) -> int:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_TERMINAL_SIDE:
        raise ValueError(f"{name} must be a whole number from 1 to {MAX_TERMINAL_SIDE}")
    return value


def _resize(body: Any) -> tuple[int, int]:
    if not isinstance(body, dict):
        raise ValueError("resize must be {\"rows\": R, \"cols\": C}")
    return _side(body, "rows", 24), _side(body, "cols", 80)


@router.websocket("/api/v1/jobs/{job_id}/tasks/{role}/{index}/exec")
async def task_exec(websocket: WebSocket, job_id: int, role: str, index: int) -> None:
    ctx = context_of(websocket)
    try:
        if not (1 <= job_id <= MAX_ID and 0 <= index <= 100_000):
            raise Refused(404, "there is no such task")
        caller = await run_in_threadpool(identify_caller, ctx, websocket.headers, dict(websocket.cookies))
        if caller is None:
            raise Refused(401, "sign in to the portal, or send 'Authorization: Bearer <token>'")
        # Browsers send cookies with a WebSocket handshake from any site: it must come from ours.
        if caller.by_cookie and not same_origin(websocket):
            raise Refused(403, "a terminal opens only from this server's own pages")
        task = await run_in_threadpool(running_task, ctx.db, caller, job_id, role, index, what="its tasks",
                                       instead=f"yard shell {job_id}")
        if not isinstance(ctx.backend, TaskExec):
            raise Refused(409, f"the {ctx.backend.name} backend cannot run commands in its tasks")
    except Refused as exc:
        await deny(websocket, exc)
        return
    await websocket.accept()
    try:
        async with ctx.connections.watch(caller.credential) as ended:  # revoked: the command is hung up
            await _session(websocket, ctx, caller, task, ended)
    except WebSocketDisconnect:
        pass
    with contextlib.suppress(RuntimeError, WebSocketDisconnect):
        await websocket.close()


async def _session(websocket: WebSocket, ctx: AppContext, caller: Caller, task: RunningTask,
                   ended: asyncio.Event) -> None:
    backend = ctx.backend
    assert isinstance(backend, TaskExec)
    try:
        request = ExecRequest.parse(await websocket.receive_text())
    except (ValueError, KeyError) as exc:  # KeyError: a binary frame first
        await _fail(websocket, BAD_REQUEST, str(exc) if isinstance(exc, ValueError) else
                    "the first frame must be text: {\"argv\": [...], \"tty\": false}")
        return
    command = request.argv or SHELL_COMMAND
    try:
        plan: ExecPlan = await run_in_threadpool(backend.exec_plan, task.key, task.node, command, tty=request.tty)
    except ExecError as exc:
        await _fail(websocket, UNREACHABLE, str(exc))
        return
    message = request.describe(caller.user.name, task.key.role, task.key.index)
    await run_in_threadpool(record_exec, ctx.db, ctx.clock, task.key.job_id, message)
    try:
        process = await ExecProcess.start(plan.argv, plan.env, plan.cwd, tty=request.tty, rows=request.rows,
                                          cols=request.cols)
    except OSError as exc:
        await _fail(websocket, SERVER_ERROR, f"the command could not be started: {exc}")
        return
    await _relay(websocket, process, plan.marker, ended)


async def _relay(websocket: WebSocket, process: ExecProcess, marker: str | None, ended: asyncio.Event) -> None:
    """Carry bytes both ways until the command exits (then its status), the client leaves,
    or the credential that opened it no longer holds (then the command is hung up, and the
    socket closed with ``REVOKED_CLOSE_CODE``)."""

    async def from_client() -> None:
        while True:
            frame = await websocket.receive()
            if frame["type"] == "websocket.disconnect":
                return
            if frame.get("bytes") is not None:
                await process.write(frame["bytes"])
            elif frame.get("text") is not None:
                _control(process, frame["text"])

    async def to_client() -> None:
        async for channel, data in process.output():
            await websocket.send_bytes(bytes([channel]) + data)

    reading, writing, waiting = (asyncio.ensure_future(c) for c in (from_client(), to_client(), process.wait()))
    revoked = asyncio.ensure_future(ended.wait())
    try:
        await asyncio.wait({reading, waiting, revoked}, return_when=asyncio.FIRST_COMPLETED)
        if not waiting.done() and revoked.done():  # closed first, then hung up (below)
            await _fail(websocket, REVOKED_CLOSE_CODE, REVOKED_REASON)
            return
        if not waiting.done():  # the client went away first
            await process.hang_up(marker)
            return
        with contextlib.suppress(WebSocketDisconnect, RuntimeError):
            await writing  # what the command wrote before it exited, all of it
            await websocket.send_text(json.dumps({"exit": waiting.result()}))
    finally:
        revoked.cancel()
        for task in (reading, writing, waiting):
            task.cancel()
        for task in (reading, writing):
            with contextlib.suppress(asyncio.CancelledError, WebSocketDisconnect, RuntimeError, OSError):
                await task
        if not waiting.done() or waiting.cancelled():
            await process.hang_up(marker)
        process.close()


def _control(process: ExecProcess, text: str) -> None:
    """A control frame of the client's; one it gets wrong is ignored (and logged)."""
    try:
        body = json.loads(text)
        if not isinstance(body, dict):
            raise ValueError("not an object")
        if "resize" in body:
            process.resize(*_resize(body["resize"]))
        elif body.get("eof") is True:
            process.close_input()
        elif "signal" in body:
            process.send_signal(SIGNALS[str(body["signal"]).upper().removeprefix("SIG")])
        else:
            raise ValueError("no resize, eof or signal in it")
    except (ValueError, KeyError, TypeError) as exc:
        log.info("ignored an exec control frame %r: %s", text[:100], exc)


async def _fail(websocket: WebSocket, code: int, message: str) -> None:
    with contextlib.suppress(WebSocketDisconnect, RuntimeError):
        await websocket.send_text(json.dumps({"error": message}))
        await websocket.close(code=code, reason=message[:120])
