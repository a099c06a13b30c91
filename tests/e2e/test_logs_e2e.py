"""Task logs through a real ``yard up``: a log of any size read whole, a follower that does not
hold a stopping server up, and a follower of a waiting job told why it waits."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from deadlines import scaled

from e2e.server import Server, wait_until
from trainyard.cli.exits import EXIT_UNREACHABLE
from trainyard.schemas.jobs import LOG_PAGE_BYTES

pytestmark = [pytest.mark.e2e, pytest.mark.idle_cluster]  # the worker's shared `yard up` (conftest.py)

LINES = 500_000  # `seq` writes 3.2 MiB: three pages and more


@contextmanager
def follower(server: Server, job_id: int) -> Iterator[subprocess.Popen[bytes]]:
    """``yard logs JOB -f`` running, its stdout and stderr piped; killed if the test leaves it running."""
    process = subprocess.Popen(
        [sys.executable, "-m", "trainyard.cli.main", "logs", str(job_id), "-f"],
        env=server.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


def read_line(stream: object, timeout: float = 30.0) -> bytes:
    """The next line a child process writes to ``stream`` (a pipe), or fail after ``timeout``."""
    fd = stream.fileno()  # type: ignore[attr-defined]
    line = b""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        deadline = time.monotonic() + scaled(timeout)
        while not line.endswith(b"\n"):
            if not selector.select(max(0.0, deadline - time.monotonic())):
                raise AssertionError(f"no whole line within {timeout} s (so far {line!r})")
            byte = os.read(fd, 1)  # one at a time: nothing is read past the line
            if not byte:
                raise AssertionError(f"the stream ended after {line!r}")
            line += byte
    return line


def test_a_log_of_several_mebibytes_comes_back_whole_through_the_cli_and_the_sdk(server: Server) -> None:
    client = server.admin()
    job = client.submit(f"name: big-log\ntaskRoles:\n  m:\n    commands: ['seq 1 {LINES}']\n")
    assert client.wait(job.id, timeout=scaled(60)).state == "SUCCEEDED"
    expected = "".join(f"{i}\n" for i in range(1, LINES + 1))
    assert len(expected) > 3 * LOG_PAGE_BYTES

    printed = server.yard("logs", str(job.id))
    assert (printed.returncode, printed.stderr) == (0, "")
    assert printed.stdout == expected

    assert client.logs(job.id) == expected.encode()
    pages = list(client.iter_logs(job.id))
    assert len(pages) == 4 and b"".join(p.data for p in pages) == expected.encode()
    assert all(p.data.endswith(b"\n") for p in pages)  # no line is cut at a page's end
    assert [p.offset for p in pages[1:]] == [p.end for p in pages[:-1]]

    assert server.yard("logs", str(job.id), "--tail", "2").stdout == f"{LINES - 1}\n{LINES}\n"
    capped = server.yard("logs", str(job.id), "--limit-bytes", "10")
    assert (capped.returncode, capped.stdout) == (0, "1\n2\n3\n4\n5\n")
    assert capped.stderr == (
        f"yard: output cut at --limit-bytes 10: the log has {len(expected) - 10} more bytes "
        f"(to byte {len(expected)}); leave out --limit-bytes for all of it\n"
    )
    refused = server.yard("logs", str(job.id), "--limit-bytes", "-1")
    assert refused.returncode == 2 and "--limit-bytes: '-1' is not a whole number" in refused.stderr


@pytest.mark.own_server  # it stops the server
def test_ctrl_c_stops_the_server_at_once_while_a_log_is_followed(server: Server) -> None:
    client = server.admin()
    job = client.submit("name: long\ntaskRoles:\n  m:\n    commands: ['echo started; sleep 600']\n")
    wait_until(lambda: client.logs(job.id) == b"started\n", timeout=30, what="the task to start")
    with follower(server, job.id) as follow:
        assert read_line(follow.stdout) == b"started\n"
        assert server.process is not None
        server.process.send_signal(signal.SIGINT)
        out, err = follow.communicate(timeout=scaled(20))
        server.process.wait(timeout=scaled(20))
    assert server.process.returncode == 0
    log = server.log()
    # At once: the follower's response ended as the server began stopping, not when uvicorn
    # gave up waiting for it (GRACEFUL_SHUTDOWN_SECONDS later), which it would have said.
    assert "timeout graceful shutdown exceeded" not in log, log
    assert "Traceback" not in log and " ERROR " not in log, log
    assert out == b"" and follow.returncode == EXIT_UNREACHABLE
    assert err.decode() == (
        f"yard: lost the Trainyard server at {server.url} while following the log of job {job.id}: "
        "it stopped (the job goes on; follow it again once the server is back)\n"
    )


def test_following_a_waiting_job_says_why_it_waits_then_follows_it_once_it_runs(server: Server) -> None:
    client = server.admin()
    hog = client.submit("name: hog\ntaskRoles:\n  m:\n    resourcePerInstance: {gpu: 4}\n    commands: ['sleep 600']\n")
    wait_until(lambda: client.job(hog.id).state == "RUNNING", timeout=30, what="the hog to run")
    job = client.submit(
        "name: later\ntaskRoles:\n  m:\n    resourcePerInstance: {gpu: 1}\n    commands: ['echo hello from later']\n"
    )
    pending = wait_until(lambda: client.job(job.id).pending, timeout=30, what="a pending reason")
    with follower(server, job.id) as follow:
        said = read_line(follow.stderr).decode()
        assert said.startswith(f"yard: job {job.id} is waiting ({pending.reason}: ")
        assert said.endswith("); its log follows once it starts (Ctrl-C to stop waiting)\n")
        assert follow.poll() is None  # still there, waiting
        client.stop(hog.id)
        out, err = follow.communicate(timeout=scaled(60))
    assert (follow.returncode, out) == (0, b"hello from later\n")
    assert err.decode().endswith(f"yard: job {job.id} started; following task m/0\n")
