"""One command run in a task for ``yard exec``/``yard shell``: the process the server starts
from a backend's ``ExecPlan``, under a terminal of its own or with pipes, and its bytes.

With a terminal (``tty``) the command gets a fresh pseudo-terminal as its controlling
terminal (``setsid --ctty``), as sshd gives a login: the terminal's line discipline turns
a Ctrl-C typed by the user (the byte 0x03) into SIGINT for the foreground job, and a
resize (TIOCSWINSZ on the master) into SIGWINCH. Without one it gets pipes: stdout and
stderr stay apart, and the user's Ctrl-C comes as a signal for its process group. Either
way the command leads a process group (a session, with a terminal) that ``hang_up`` ends
when the user goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import select
import shutil
import signal
import struct
import termios
from collections.abc import AsyncIterator, Mapping, Sequence

STDOUT, STDERR = 1, 2  # the channel byte in front of each output frame
CHUNK = 65536
# After the command has exited, how long its output may still come: a process it left
# in the background may hold the terminal or the pipes open for ever.
DRAIN_SECONDS = 2.0
HANG_UP_GRACE_SECONDS = 2.0
TERMINAL_TYPE = "xterm-256color"  # $TERM with a terminal: what the CLI's and the portal's (xterm.js) understand


def exit_status(returncode: int) -> int:
    """A shell's way of saying how a process ended: its status, or 128 + the signal."""
    return 128 - returncode if returncode < 0 else returncode


class ExecProcess:
    """A started command; see the module docstring."""

    def __init__(self, process: asyncio.subprocess.Process, master: int | None) -> None:
        self.process = process
        self.master = master  # the terminal's master side; None: pipes
        self._output: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue(maxsize=64)
        self._open_streams = 0
        self._readers: list[asyncio.Task[None]] = []

    @classmethod
    async def start(cls, argv: Sequence[str], env: Mapping[str, str] | None, cwd: str | None, *,
                    tty: bool, rows: int, cols: int) -> ExecProcess:
        """Start ``argv``; OSError when it cannot be (the message says why)."""
        if not tty:
            process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, env=None if env is None else dict(env), cwd=cwd,
                start_new_session=True)
            started = cls(process, None)
            assert process.stdout is not None and process.stderr is not None
            started._read_stream(STDOUT, process.stdout)
            started._read_stream(STDERR, process.stderr)
            return started
        setsid = shutil.which("setsid")
        if setsid is None:
            raise OSError("util-linux's setsid is not installed on the server; a terminal needs it")
        if env is not None:  # what the terminal understands, unless the task says otherwise
            env = {"TERM": TERMINAL_TYPE, **env}
        master, slave = os.openpty()
        try:
            _set_size(slave, rows, cols)
            # Not a group leader, setsid makes a new session in this very process and takes
            # the terminal on its stdin as the session's (no fork: the pid stays the command's).
            process = await asyncio.create_subprocess_exec(
                setsid, "--ctty", *argv, stdin=slave, stdout=slave, stderr=slave,
                env=None if env is None else dict(env), cwd=cwd)
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        started = cls(process, master)
        started._read_terminal()
        return started

    # --- output -------------------------------------------------------------------

    def _read_stream(self, channel: int, stream: asyncio.StreamReader) -> None:
        async def pump() -> None:
            try:
                while data := await stream.read(CHUNK):
                    await self._output.put((channel, data))
            finally:
                await self._stream_closed()

        self._open_streams += 1
        self._readers.append(asyncio.ensure_future(pump()))

    def _read_terminal(self) -> None:
        assert self.master is not None
        master, loop = self.master, asyncio.get_running_loop()
        readable = asyncio.Event()
        loop.add_reader(master, readable.set)

        async def pump() -> None:
            try:
                while True:
                    await readable.wait()
                    readable.clear()
                    try:
                        data = os.read(master, CHUNK)
                    except BlockingIOError:
                        continue
                    except OSError:  # EIO: no process holds the terminal any more
                        return
                    if not data:
                        return
                    await self._output.put((STDOUT, data))
            finally:
                loop.remove_reader(master)
                await self._stream_closed()

        self._open_streams += 1
        os.set_blocking(master, False)
        self._readers.append(asyncio.ensure_future(pump()))

    async def _stream_closed(self) -> None:
        self._open_streams -= 1
        if self._open_streams == 0:
            await self._output.put(None)

    async def output(self) -> AsyncIterator[tuple[int, bytes]]:
        """``(channel, bytes)`` as the command writes them, until it and all it left behind
        have closed its output, or ``DRAIN_SECONDS`` after it exited."""
        while True:
            if self.process.returncode is None:
                item = await self._output.get()
            else:
                try:
                    item = await asyncio.wait_for(self._output.get(), DRAIN_SECONDS)
                except TimeoutError:
                    return
            if item is None:
                return
            yield item

    # --- input and control ----------------------------------------------------------

    async def write(self, data: bytes) -> None:
        if self.master is not None:
            await asyncio.to_thread(_write_all, self.master, data)
        elif self.process.stdin is not None and not self.process.stdin.is_closing():
            self.process.stdin.write(data)
            with contextlib.suppress(ConnectionError):
                await self.process.stdin.drain()

    def close_input(self) -> None:
        """End of the user's input: the command reads EOF (a terminal's EOF is Ctrl-D, typed)."""
        if self.master is None and self.process.stdin is not None:
            self.process.stdin.close()

    def resize(self, rows: int, cols: int) -> None:
        if self.master is not None:
            _set_size(self.master, rows, cols)  # the kernel sends SIGWINCH to the foreground job

    def send_signal(self, sig: int) -> None:
        """Signal the command's process group (it leads one)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, sig)

    async def wait(self) -> int:
        """The command's exit status (128 + N when signal N killed it)."""
        return exit_status(await self.process.wait())

    async def hang_up(self, marker: str | None = None) -> None:
        """The user went away: SIGHUP the command's group, SIGKILL it after a grace, and
        let go of its output. With a ``marker`` (``ExecPlan.marker``), then SIGKILL every
        process of this machine whose environment carries it."""
        if self.process.returncode is None:
            self.send_signal(signal.SIGHUP)
            self.send_signal(signal.SIGCONT)
            try:
                await asyncio.wait_for(self.process.wait(), HANG_UP_GRACE_SECONDS)
            except TimeoutError:
                self.send_signal(signal.SIGKILL)
                await self.process.wait()
        if marker is not None:
            await asyncio.to_thread(kill_marked, marker)
        self.close()

    def close(self) -> None:
        for reader in self._readers:
            reader.cancel()
        if self.master is not None:
            with contextlib.suppress(OSError):
                asyncio.get_running_loop().remove_reader(self.master)
            with contextlib.suppress(OSError):
                os.close(self.master)
            self.master = None


def kill_marked(marker: str) -> list[int]:
    """SIGKILL the processes whose environment holds ``marker`` (``NAME=VALUE``), as far as
    this server may read and signal them; their pids."""
    wanted, killed = marker.encode() + b"\0", []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                found = (b"\0" + f.read()).find(b"\0" + wanted) >= 0
            if found:
                os.kill(int(entry), signal.SIGKILL)
                killed.append(int(entry))
        except OSError:  # gone, or not ours to read
            continue
    return killed


def _set_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to a non-blocking terminal master, waiting while it is full."""
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [], 1.0)
            continue
        view = view[written:]
