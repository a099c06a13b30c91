"""``yard port-forward ID [--task ROLE/I] LOCAL:REMOTE``: a local port that reaches a port of a
running task, through the API (no node port is exposed to the user's machine).

Each local connection opens its own WebSocket tunnel
(``/api/v1/jobs/ID/tasks/ROLE/I/ports/REMOTE/tunnel``), so one slow or broken connection
affects no other, and the server's checks (owner or admin, the task's own port) run for each.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from urllib.parse import quote

from trainyard.cli.exits import EXIT_USAGE
from trainyard.client import Client, UsageError
from trainyard.core.states import TaskState
from trainyard.schemas.jobs import TaskView

CHUNK = 65536


def _ports(text: str) -> tuple[int, int]:
    local, sep, remote = text.partition(":")
    if not sep:
        local = remote = text
    try:
        pair = int(local), int(remote)
    except ValueError:
        raise UsageError(f"{text!r} is not LOCAL:REMOTE (two port numbers, e.g. 6006:6006)") from None
    if not all(0 <= p <= 65535 for p in pair) or pair[1] == 0:
        raise UsageError(f"{text!r}: ports are 1 to 65535 (LOCAL 0: any free port)")
    return pair


def running_task(client: Client, job_id: int, task: str | None, what: str) -> TaskView:
    """The running task ``task`` names (ROLE/INDEX), or the job's first running task; checked
    before connecting (the server checks again). ``what`` says what needs it to run."""
    job = client.job(job_id)
    tasks = [t for t in job.attempts[-1].tasks if t.state == TaskState.RUNNING] if job.attempts else []
    if task is not None:
        role, sep, index = task.partition("/")
        if not sep or not index.isdigit() or not role:
            raise UsageError(f"--task {task!r} is not ROLE/INDEX (e.g. main/0)")
        tasks = [t for t in tasks if (t.role, t.index) == (role, int(index))]
    if not tasks:
        raise UsageError(f"job {job_id} ({job.state}) has no running task{' ' + task if task else ''}; "
                         f"{what} only while it runs")
    return tasks[0]


def _task(client: Client, job_id: int, task: str | None, remote: int) -> tuple[str, int]:
    """The task to reach, checked before listening: the job is the caller's to see, it runs,
    and the port is the task's own (the server checks all of it again on every connection)."""
    chosen = running_task(client, job_id, task, "its ports are reachable")
    allocated = sorted(p for ports in chosen.ports.values() for p in ports)
    if remote not in allocated:
        which = ", ".join(map(str, allocated)) or "none (declare them in resourcePerInstance.ports)"
        raise UsageError(f"port {remote} is not one of task {chosen.role}/{chosen.index}'s ports: {which}")
    return chosen.role, chosen.index


async def _serve(client: Client, job_id: int, role: str, index: int, local: int, remote: int) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed, InvalidStatus

    url, headers = client.websocket(f"/jobs/{job_id}/tasks/{quote(role, safe='')}/{index}/ports/{remote}/tunnel")

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with connect(url, additional_headers=headers, max_size=None, compression=None,
                               open_timeout=15) as ws:
                async def up() -> None:
                    while data := await reader.read(CHUNK):
                        await ws.send(data)
                    await ws.close()

                async def down() -> None:
                    async for message in ws:
                        writer.write(message if isinstance(message, bytes) else message.encode())
                        await writer.drain()

                tasks = [asyncio.ensure_future(up()), asyncio.ensure_future(down())]
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
                for task in tasks:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, ConnectionClosed, OSError):
                        await task
        except InvalidStatus as exc:
            body = exc.response.body.decode(errors="replace") if exc.response.body else ""
            print(f"yard: connection refused by the server ({exc.response.status_code}): {body}", file=sys.stderr)
        except (OSError, ConnectionClosed, TimeoutError) as exc:
            print(f"yard: tunnel failed: {exc}", file=sys.stderr)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    server = await asyncio.start_server(handle, "127.0.0.1", local)
    bound = server.sockets[0].getsockname()[1]
    print(f"Forwarding 127.0.0.1:{bound} -> job {job_id} {role}/{index}:{remote} (Ctrl-C stops)", flush=True)
    async with server:
        await server.serve_forever()


def cmd_port_forward(client: Client, args: argparse.Namespace) -> int:
    local, remote = _ports(args.ports)
    role, index = _task(client, args.id, args.task, remote)
    try:
        asyncio.run(_serve(client, args.id, role, index, local, remote))
    except OSError as exc:
        print(f"yard: cannot listen on 127.0.0.1:{local}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("stopped forwarding", file=sys.stderr)
    return 0
