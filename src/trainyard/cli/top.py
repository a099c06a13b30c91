"""``yard top``: nodes and running jobs with live GPU, CPU and memory use (``GET /top``),
redrawn in place on a terminal like ``arena top`` or ``nvtop``, or printed once.

The screen is plain ANSI (the alternate screen, cursor home, clear to end of line), so it
needs no curses. While it runs, the keyboard is in cbreak mode so that ``q`` quits without
Enter; whatever ends it (``q``, Ctrl-C, an error from the server) gives the terminal back
as it was: its mode, the cursor, and the screen the user had before.
"""

from __future__ import annotations

import argparse
import os
import select
import shutil
import sys
import termios
import time
import tty
from collections.abc import Callable
from typing import Any, TextIO

from trainyard.cli import render
from trainyard.client import Client
from trainyard.core.printable import shown
from trainyard.schemas.cluster import TopView

ENTER_SCREEN = "\x1b[?1049h\x1b[?25l"  # the alternate screen, cursor hidden
LEAVE_SCREEN = "\x1b[?25h\x1b[?1049l"  # cursor shown, the user's own screen back
HOME = "\x1b[H"
CLEAR_TO_LINE_END = "\x1b[K"
CLEAR_BELOW = "\x1b[J"


def cmd_top(client: Client, args: argparse.Namespace) -> int:
    if args.json:
        render.print_json(client.top())
        return 0
    if args.once or not sys.stdout.isatty():
        print(shown(top_screen(client.top())))  # as the live view: other users' names escaped
        return 0
    return refresh_in_place(client.top, args.interval, keyboard=sys.stdin, screen=sys.stdout)


def refresh_in_place(fetch: Callable[[], TopView], interval: float, *, keyboard: TextIO, screen: TextIO) -> int:
    """Redraw the live view every ``interval`` seconds until ``q`` or Ctrl-C; 0 then."""
    keys = QuitKey(keyboard)
    screen.write(ENTER_SCREEN)
    screen.flush()
    try:
        with keys:
            while True:
                size = _terminal_size(screen)
                footer = f"every {interval:g}s; q or Ctrl-C quits"
                # Other users' job names and messages: escaped (cli/terminal.py), newlines kept.
                frame = shown(top_screen(fetch(), width=size.columns, height=size.lines, footer=footer))
                # Over the previous frame, line by line, rather than clear-then-draw: no flicker.
                lines = [line + CLEAR_TO_LINE_END for line in frame.split("\n")]
                screen.write(HOME + "\n".join(lines) + CLEAR_BELOW)
                screen.flush()
                if keys.pressed_within(interval):
                    return 0
    except KeyboardInterrupt:
        return 0
    finally:
        screen.write(LEAVE_SCREEN)
        screen.flush()


def _terminal_size(screen: TextIO) -> os.terminal_size:
    try:
        return os.get_terminal_size(screen.fileno())
    except (OSError, ValueError):
        return shutil.get_terminal_size()


class QuitKey:
    """Watches the keyboard for ``q`` while waiting, in cbreak mode (keys arrive unbuffered
    and unechoed, Ctrl-C still interrupts); a keyboard that is no terminal only waits."""

    def __init__(self, keyboard: TextIO) -> None:
        self._fd: int | None = keyboard.fileno() if keyboard.isatty() else None
        self._saved: list[Any] | None = None

    def __enter__(self) -> QuitKey:
        if self._fd is not None:
            self._saved = termios.tcgetattr(self._fd)
            tty.setcbreak(self._fd)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None and self._saved is not None:
            termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)

    def pressed_within(self, seconds: float) -> bool:
        """Wait up to ``seconds``; True as soon as ``q`` is pressed."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self._fd is None:
                time.sleep(left)
                break
            ready, _, _ = select.select([self._fd], [], [], left)
            if ready:
                typed = os.read(self._fd, 64)
                if not typed:  # the terminal went away: nothing more will be typed
                    self._fd = None
                elif b"q" in typed.lower():
                    return True
        return False


def _used_of(used: int | None, total: int) -> str:
    return "n/a" if used is None else f"{used}/{total}"


def _gpu_rows(top: TopView) -> list[list[str]]:
    rows = []
    for n in top.nodes:
        for g in n.gpus:
            u = g.usage
            rows.append([
                f"{n.name}/{g.index}", g.model, render.num(g.used), render.pct(u.utilPct if u else None),
                _used_of(u.memoryUsedMB if u else None, g.memoryMB),
                "n/a" if u is None or u.temperatureC is None else f"{u.temperatureC:.0f}C",
                "n/a" if u is None or u.powerW is None else f"{u.powerW:.0f}W",
                "n/a" if u is None else ("ok" if u.healthy else "lost"),  # NVML: the GPU stopped answering
                ", ".join(map(str, g.jobs)) or "-",
            ])
    return rows


def top_screen(top: TopView, *, width: int | None = None, height: int | None = None, footer: str = "") -> str:
    """The snapshot as text: a summary line, nodes, GPUs, and running jobs busiest first;
    cut to ``width`` x ``height`` when drawn on a terminal of that size."""
    gpus = [g for n in top.nodes for g in n.gpus]
    allocated = sum(g.used for g in gpus)
    summary = (f"{render.when(top.at)}  {len(top.nodes)} node(s)  GPUs {render.num(allocated)}/{len(gpus)} allocated, "
               f"util {render.pct(render.gpu_util(gpus))}  {len(top.jobs)} running job(s)")
    nodes = [[
        n.name, "cordoned" if n.cordoned else ("up" if n.schedulable else "down"),
        f"{render.num(sum(g.used for g in n.gpus))}/{len(n.gpus)}", render.pct(render.gpu_util(n.gpus)),
        render.mib(render.gpu_memory_in_use(n.gpus)), render.pct(n.usage.cpuPct if n.usage else None),
        # Measured on the whole machine, so out of the machine's memory when it was sampled.
        _used_of(n.usage.memoryUsedMB, n.usage.memoryTotalMB or n.memoryMB) if n.usage else "n/a",
        render.pct(n.usage.diskUsedPct if n.usage else None),
    ] for n in top.nodes]
    jobs = [[
        j.id, j.name, j.user, j.vc, render.num(j.gpus), render.pct(j.gpuUtilPct), render.mib(j.gpuMemoryMB),
        "n/a" if j.cpuCores is None else f"{j.cpuCores:.1f}", render.mib(j.memoryMB), f"{j.tasksSampled}/{j.tasks}",
        render.seconds_text(j.runtimeSeconds),
    ] for j in top.jobs]
    parts = [
        summary,
        "",
        render.table(["NODE", "STATE", "GPUS", "GPU UTIL", "GPU MEM (MiB)", "CPU %", "MEM (MiB)", "DISK"], nodes),
        "",
        render.table(["GPU", "MODEL", "ALLOC", "UTIL", "MEM (MiB)", "TEMP", "POWER", "HEALTH", "JOBS"],
                     _gpu_rows(top)),
        "",
        render.table(["JOB", "NAME", "USER", "VC", "GPUS", "GPU UTIL", "GPU MEM (MiB)", "CPU", "MEM (MiB)",
                      "SAMPLED", "RUN TIME"], jobs) if jobs else "no running jobs",
    ]
    lines = "\n".join(parts).split("\n")
    if height is not None:
        room = max(height - (1 if footer else 0), 1)
        if len(lines) > room:
            lines = lines[:room - 1] + [f"... {len(lines) - room + 1} more line(s); widen or heighten the terminal"]
    if footer:
        lines.append(footer)
    if width is not None:
        lines = [line[:width] for line in lines]
    return "\n".join(lines)
