"""``yard exec ID [--task ROLE/I] -- CMD…`` and ``yard shell ID [--task ROLE/I]``: a command,
or an interactive shell, inside a running task, through the server's exec WebSocket
(``api/routers/taskexec`` documents the protocol).

``yard exec`` streams the command's stdout and stderr to ours, forwards our stdin (its
end included) and a Ctrl-C (as SIGINT for the command), and exits with the command's exit
status. ``yard shell`` puts our terminal in raw mode and gives the remote shell a terminal
of our size: every key, Ctrl-C included, reaches the remote terminal, and a resize of ours
resizes it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import termios
import threading
import tty as ttymode
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from trainyard.cli.exits import EXIT_ERROR
from trainyard.cli.forward import running_task
from trainyard.client import Client, UsageError

CHUNK = 65536
STDOUT, STDERR = 1, 2


def cmd_exec(client: Client, args: argparse.Namespace) -> int:
    if not args.argv:
        raise UsageError("name the command to run after --, e.g. `yard exec 3 -- nvidia-smi` "
                         "(`yard shell 3` for a shell)")
    if args.tty and not os.isatty(0):
        raise UsageError("--tty needs a terminal on stdin")
    return _connect(client, args, list(args.argv), tty=bool(args.tty))


def cmd_shell(client: Client, args: argparse.Namespace) -> int:
    if not os.isatty(0) or not os.isatty(1):
        raise UsageError("yard shell needs a terminal; to run a command without one: yard exec ID -- CMD")
    return _connect(client, args, [], tty=True)


def _connect(client: Client, args: argparse.Namespace, argv: list[str], *, tty: bool) -> int:
    what = "commands run in it" if argv else "a shell opens in it"
    task = running_task(client, args.id, args.task, what)
    url, headers = client.websocket(f"/jobs/{args.id}/tasks/{quote(task.role, safe='')}/{task.index}/exec")
    rows, cols = _terminal_size() if tty else (24, 80)
    first = {"argv": argv, "tty": tty, "rows": rows, "cols": cols}
    saved = termios.tcgetattr(0) if tty else None
    try:
        if tty:
            ttymode.setraw(0)
        return asyncio.run(_session(url, headers, first, tty))
    finally:
        if saved is not None:
            termios.tcsetattr(0, termios.TCSADRAIN, saved)


async def _session(url: str, headers: dict[str, str], first: dict[str, Any], tty: bool) -> int:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed, InvalidStatus
    from websockets.protocol import State

    loop = asyncio.get_running_loop()
    try:
        ws = await connect(url, additional_headers=headers, max_size=None, compression=None, open_timeout=15)
    except InvalidStatus as exc:
        return _refused(exc.response.status_code, bytes(exc.response.body or b""))
    except (OSError, TimeoutError) as exc:
        _say(f"cannot reach the server's exec endpoint: {exc}", tty)
        return EXIT_ERROR
    interrupts = 0

    def send(message: str | bytes) -> None:
        if ws.state is not State.OPEN:
            return
        asyncio.ensure_future(_quietly(ws.send(message)))

    def on_interrupt() -> None:  # without a terminal: Ctrl-C becomes SIGINT for the command
        nonlocal interrupts
        interrupts += 1
        if interrupts > 1:  # twice: the user wants out, whatever the command does
            asyncio.ensure_future(ws.close())
        send(json.dumps({"signal": "INT"}))

    def on_resize() -> None:
        rows, cols = _terminal_size()
        send(json.dumps({"resize": {"rows": rows, "cols": cols}}))

    try:
        await ws.send(json.dumps(first))
        _forward_stdin(loop, send, tty)
        if tty:
            loop.add_signal_handler(signal.SIGWINCH, on_resize)
        else:
            loop.add_signal_handler(signal.SIGINT, on_interrupt)
        code: int | None = None
        async for message in ws:
            if isinstance(message, bytes):
                if message:
                    stream = sys.stderr.buffer if message[0] == STDERR else sys.stdout.buffer
                    stream.write(message[1:])
                    stream.flush()
                continue
            body = json.loads(message)
            if "exit" in body:
                code = int(body["exit"])
            elif "error" in body:
                _say(str(body["error"]), tty)
                code = EXIT_ERROR
        if code is None:
            _say("the connection closed before the command's exit status came", tty)
            return 130 if interrupts > 1 else EXIT_ERROR
        return code
    except ConnectionClosed:
        _say("the connection to the server was lost", tty)
        return EXIT_ERROR
    finally:
        with contextlib.suppress(NotImplementedError, ValueError):
            loop.remove_signal_handler(signal.SIGWINCH if tty else signal.SIGINT)
        await ws.close()


def _forward_stdin(loop: asyncio.AbstractEventLoop, send: Callable[[str | bytes], None], tty: bool) -> None:
    """Our stdin to the command, from a thread (a blocking read: stdin may be a file, a
    pipe or a terminal); without a terminal, its end becomes the command's end of input.
    A daemon thread: a read left waiting on the terminal never holds up our exit."""

    def read() -> None:
        while True:
            try:
                data = os.read(0, CHUNK)
            except OSError:
                data = b""
            if not data:
                if not tty:
                    loop.call_soon_threadsafe(send, json.dumps({"eof": True}))
                return
            loop.call_soon_threadsafe(send, data)

    threading.Thread(target=read, name="yard-exec-stdin", daemon=True).start()


async def _quietly(sending: Any) -> None:
    from websockets.exceptions import ConnectionClosed

    with contextlib.suppress(ConnectionClosed):
        await sending


def _refused(status: int, body: bytes | None) -> int:
    try:
        detail = json.loads(body or b"{}").get("detail") or ""
    except ValueError:
        detail = (body or b"").decode(errors="replace")
    _say(f"{detail or 'refused'} ({status})", False)
    return EXIT_ERROR


def _say(message: str, tty: bool) -> None:
    end = "\r\n" if tty else "\n"  # in raw mode a newline does not return the carriage
    sys.stderr.write(f"yard: {message}{end}")
    sys.stderr.flush()


def _terminal_size() -> tuple[int, int]:
    try:
        size = os.get_terminal_size(0)
    except OSError:
        return 24, 80
    return max(1, size.lines), max(1, size.columns)
