"""`yard top` and `yard nodes`: live use beside allocation, once, as JSON, and redrawn in
place on a (pseudo-)terminal until q or Ctrl-C, which give the terminal back as it was."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import struct
import sys
import termios
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import TextIO

import pytest
from api.harness import Api
from api.live_harness import gpu, live_api, node_sample, running_job, store_round, task_sample

from trainyard.cli.main import main
from trainyard.cli.top import CLEAR_BELOW, CLEAR_TO_LINE_END, ENTER_SCREEN, HOME, LEAVE_SCREEN, refresh_in_place
from trainyard.client import Client
from trainyard.controller.loop import Controller
from trainyard.schemas.cluster import TopView

READ_TIMEOUT = 20.0  # seconds to wait for the next bytes on the terminal before failing


@pytest.fixture
def cluster(db, tmp_path) -> Iterator[tuple[Api, Controller]]:
    with live_api(db, tmp_path) as pair:
        yield pair


@pytest.fixture
def api(cluster: tuple[Api, Controller]) -> Api:  # the one `yard` runs against (tests/cli/conftest.py)
    return cluster[0]


@pytest.fixture
def busy(cluster: tuple[Api, Controller]) -> tuple[int, int]:
    """alice's job "slow" (1 GPU, 15 % busy) and the admin's job "fast" (2 GPUs, 88 % busy),
    on a node whose GPU 3 is simulated (no utilisation)."""
    api, controller = cluster
    slow = running_job(api, controller, api.user_token, "slow")
    fast = running_job(api, controller, api.admin_token, "fast", gpus=2)
    node = api.admin.get("/api/v1/nodes").json()[0]["name"]
    now = datetime.now(UTC)
    store_round(api, nodes=(node_sample(node, now, (gpu(0, 15.0), gpu(1, 88.0), gpu(2, 88.0),
                                                    gpu(3, None, simulated=True)),
                                        cpu_pct=23.0, memory_used_mb=5120, memory_total_mb=24000, disk_used_pct=42.0),),
                tasks=(task_sample(slow, 0, node, now, gpus_held=1.0, gpu_util_pct=15.0, gpu_memory_mb=700,
                                   cpu_cores=0.9, memory_mb=300),
                       task_sample(fast, 0, node, now, gpus_held=2.0, gpu_util_pct=88.0, gpu_memory_mb=2000,
                                   cpu_cores=3.2, memory_mb=900)))
    return slow, fast


def _rows(out: str, first_header: str) -> list[list[str]]:
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first_header))
    rows = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


def test_top_once_shows_jobs_busiest_first_and_simulated_gpus_as_n_a(yard, api: Api, busy) -> None:
    slow, fast = busy
    code, out, err = yard("top", "--once", token=api.admin_token)
    assert code == 0 and err == ""
    assert "GPUs 3/4 allocated, util 64%  2 running job(s)" in out.splitlines()[0]  # (15+88+88)/3 measured
    [node] = _rows(out, "NODE")
    assert node[1:] == ["up", "3/4", "64%", "4000", "23%", "5120/24000", "42%"]  # the machine's memory, measured
    gpus = _rows(out, "GPU ")
    assert [g[3] for g in gpus] == ["15%", "88%", "88%", "n/a"]
    assert gpus[3][-2:] == ["ok", "-"] and gpus[3][4] == "1000/16384"
    jobs = _rows(out, "JOB")
    assert [(int(j[0]), j[1], j[5], j[6], j[7], j[8], j[9]) for j in jobs] == [
        (fast, "fast", "88%", "2000", "3.2", "900", "1/1"), (slow, "slow", "15%", "700", "0.9", "300", "1/1")]


def test_a_user_s_top_names_only_their_own_jobs(yard, busy) -> None:
    slow, _ = busy
    code, out, _ = yard("top", "--once")
    assert code == 0 and [int(j[0]) for j in _rows(out, "JOB")] == [slow]
    assert [g[-1] for g in _rows(out, "GPU ")].count(str(slow)) == 1


def test_top_json_is_the_snapshot_the_api_answers(yard, api: Api, busy) -> None:
    slow, fast = busy
    code, out, _ = yard("top", "--json", token=api.admin_token)
    top = json.loads(out)
    assert code == 0 and [j["id"] for j in top["jobs"]] == [fast, slow]
    assert top["jobs"][0]["gpuUtilPct"] == 88.0 and top["nodes"][0]["gpus"][3]["usage"]["utilPct"] is None


def test_top_not_on_a_terminal_prints_one_snapshot_and_ends(yard, busy) -> None:
    code, out, _ = yard("top", "--interval", "0.01")
    assert code == 0 and "\x1b" not in out, "no screen control codes into a pipe or file"
    assert out.splitlines()[2].startswith("NODE") and len(_rows(out, "JOB")) == 1


def test_a_bad_interval_is_refused_naming_the_option(yard, capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        yard("top", "--interval", "0")
    assert exit_.value.code == 2 and "--interval: '0' is not a number of seconds above 0" in capsys.readouterr().err


def test_yard_nodes_shows_use_beside_allocation(yard, busy) -> None:
    code, out, _ = yard("nodes")
    assert code == 0
    header = out.splitlines()[0].split("  ")
    assert [h.strip() for h in header if h.strip()] == [
        "NODE", "SCHEDULABLE", "GPU USED", "GPU UTIL", "MODEL", "CPU USED", "CPU %", "MEMORY USED (MiB)",
        "MEMORY IN USE (MiB)", "DISK"]
    row = out.splitlines()[1].split()
    assert row[2:6] == ["3/4", "(simulated)", "64%", "V100"]
    assert row[-5:] == ["2/8", "23%", "1024/16384", "5120", "42%"], "allocated, measured, allocated, measured"


def _terminal(columns: int, lines: int) -> tuple[int, int]:
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
    return controller, terminal


def _read_until(controller: int, done: Callable[[bytes], bool], shown: bytearray) -> None:
    """Read what the terminal shows into ``shown`` until ``done(shown)``."""
    while not done(bytes(shown)):
        ready, _, _ = select.select([controller], [], [], READ_TIMEOUT)
        assert ready, f"the terminal stopped short: {bytes(shown)!r}"
        shown += os.read(controller, 65536)


def _on_terminal(terminal: int, monkeypatch: pytest.MonkeyPatch) -> TextIO:
    """Point yard's stdin and stdout at ``terminal``; the screen is returned."""
    keyboard, screen = os.fdopen(terminal, "r", closefd=False), os.fdopen(terminal, "w", closefd=False)
    monkeypatch.setattr(sys, "stdin", keyboard)
    monkeypatch.setattr(sys, "stdout", screen)
    return screen


def test_on_a_terminal_top_redraws_in_place_until_q_and_gives_the_terminal_back(
        api: Api, busy, monkeypatch: pytest.MonkeyPatch) -> None:
    controller, terminal = _terminal(columns=60, lines=12)
    mode = termios.tcgetattr(terminal)
    sdk = api.sdk(api.admin_token)
    monkeypatch.setattr(Client, "from_config", classmethod(lambda cls, config=None: sdk))
    _on_terminal(terminal, monkeypatch)
    result: list[int] = []
    run = threading.Thread(target=lambda: result.append(main(["top", "--interval", "0.05"])))
    run.start()
    shown = bytearray()
    try:
        # Three whole frames: it refreshes by itself, each drawn over the last from the top.
        _read_until(controller, lambda b: b.count(HOME.encode()) >= 3 and b.endswith(CLEAR_BELOW.encode()), shown)
        assert termios.tcgetattr(terminal)[3] & termios.ICANON == 0, "keys arrive without Enter while it runs"
        os.write(controller, b"q")
        run.join(READ_TIMEOUT)
        assert not run.is_alive() and result == [0]
        _read_until(controller, lambda b: b.endswith(LEAVE_SCREEN.encode()), shown)
        assert termios.tcgetattr(terminal) == mode, "the terminal's mode is restored"
    finally:
        run.join(READ_TIMEOUT)
        os.close(controller)
        os.close(terminal)
    text = shown.decode()
    assert text.startswith(ENTER_SCREEN + HOME)
    frame = text.split(HOME)[-2 if text.endswith(HOME + LEAVE_SCREEN) else -1]
    lines = frame.removesuffix(LEAVE_SCREEN).removesuffix(CLEAR_BELOW).replace("\r\n", "\n").split("\n")
    lines = [line.removesuffix(CLEAR_TO_LINE_END) for line in lines]
    assert len(lines) == 12 and all(len(line) <= 60 for line in lines), "cut to the terminal's size"
    assert lines[0].endswith("GPUs 3/4 allocated, util 64%") and len(lines[0]) <= 60 and lines[2].startswith("NODE")
    assert lines[-2].startswith("... ") and lines[-1] == "every 0.05s; q or Ctrl-C quits"


def test_ctrl_c_ends_top_with_the_terminal_given_back(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    controller, terminal = _terminal(columns=100, lines=40)
    mode = termios.tcgetattr(terminal)
    screen = _on_terminal(terminal, monkeypatch)
    sdk = api.sdk(api.user_token)
    frames: list[TopView] = []

    def fetch() -> TopView:
        if frames:
            raise KeyboardInterrupt  # what Ctrl-C raises in the waiting or asking yard
        frames.append(sdk.top())
        return frames[0]

    shown = bytearray()
    try:
        assert refresh_in_place(fetch, 0.01, keyboard=sys.stdin, screen=screen) == 0
        assert termios.tcgetattr(terminal) == mode
        _read_until(controller, lambda b: b.endswith(LEAVE_SCREEN.encode()), shown)
    finally:
        os.close(controller)
        os.close(terminal)
    assert shown.count(HOME.encode()) == 1 and b"no running jobs" in shown
