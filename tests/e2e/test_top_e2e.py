"""`yard top` against a real `yard up`: the snapshot, and the live screen in a real process
on a pseudo-terminal, ended by q and by SIGINT (Ctrl-C) with the terminal given back."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios

import pytest
from deadlines import scaled

from e2e.server import Server, wait_until
from trainyard.cli.top import CLEAR_BELOW, ENTER_SCREEN, HOME, LEAVE_SCREEN

pytestmark = [pytest.mark.e2e, pytest.mark.idle_cluster]  # the worker's shared `yard up` (conftest.py)

READ_TIMEOUT = scaled(30)
AS_FROM_A_SHELL = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                   "sys.argv[0] = 'yard'; runpy.run_module('trainyard.cli.main', run_name='__main__')")
SLEEPER = b"name: sleeper\ntaskRoles:\n  m:\n    resourcePerInstance: {gpu: 2}\n    commands: ['sleep 600']\n"


def _live_top(server: Server, end: str) -> bytes:
    """Run `yard top` on a 100x30 pseudo-terminal until two frames are drawn, end it by ``end``
    ("q" or "sigint"), and return what the terminal showed; the process must exit 0 having
    put the terminal's mode back."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    mode = termios.tcgetattr(terminal)
    # As a terminal's shell starts it: Ctrl-C's handler in place even where this worker's own
    # SIGINT is ignored (an ignored signal stays ignored across exec, and Python then sets none).
    child = subprocess.Popen([sys.executable, "-c", AS_FROM_A_SHELL, "top", "--interval", "0.2"],
                             stdin=terminal, stdout=terminal, stderr=subprocess.PIPE, env=server.env)
    shown = b""
    try:
        def read_until(done) -> None:  # type: ignore[no-untyped-def]
            nonlocal shown
            while not done(shown):
                ready, _, _ = select.select([controller], [], [], READ_TIMEOUT)
                assert ready, (f"the terminal stopped short after {end!r}: {shown!r} "
                               f"{child.stderr.read() if child.poll() is not None else ''}")
                shown += os.read(controller, 65536)

        read_until(lambda b: b.count(HOME.encode()) >= 2 and b.endswith(CLEAR_BELOW.encode()))
        if end == "q":
            os.write(controller, b"q")
        else:
            child.send_signal(signal.SIGINT)
        # Read to the end before waiting for the exit: a terminal nobody reads fills, and the
        # program's last frames and LEAVE_SCREEN would block it (CI saw the wait time out).
        read_until(lambda b: b.endswith(LEAVE_SCREEN.encode()))
        assert child.wait(timeout=READ_TIMEOUT) == 0, child.stderr.read()
        assert termios.tcgetattr(terminal) == mode
    finally:
        if child.poll() is None:
            child.kill()
        os.close(controller)
        os.close(terminal)
    return shown


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_yard_top_shows_a_running_job_once_as_json_and_live_until_q_or_ctrl_c(server: Server) -> None:
    with server.admin() as admin:
        job = admin.submit(SLEEPER, content_type="application/yaml").id
        wait_until(lambda: admin.job(job).state == "RUNNING", what="the job to run")

    top = json.loads(server.yard("top", "--json").stdout)
    [row] = top["jobs"]
    assert row["id"] == job and row["name"] == "sleeper" and row["gpus"] == 2.0
    assert row["gpuUtilPct"] is None, "simulated GPUs have no utilisation"
    assert all(g["usage"] is None or g["usage"]["utilPct"] is None for g in top["nodes"][0]["gpus"])

    once = server.yard("top")  # not on a terminal: one snapshot, no screen control
    assert once.returncode == 0 and "sleeper" in once.stdout and "\x1b" not in once.stdout
    assert "GPUs 2/4 allocated, util n/a" in once.stdout.splitlines()[0]

    for end in ("q", "sigint"):
        shown = _live_top(server, end).decode()
        assert shown.startswith(ENTER_SCREEN) and "sleeper" in shown and "every 0.2s; q or Ctrl-C quits" in shown
