"""A progress bar for long ``yard sim`` runs, drawn on stderr only when that is a terminal.

Scripts read ``yard sim``'s stdout (``--json``) and may keep its stderr in a log: there the
bar would be noise, so it is drawn only on a terminal, and never with ``--json``. It is
one line redrawn in place (carriage return), at most ten times a second, and erased when
the run ends, so the report that follows starts on a clean line. Standard library only:
``yard --help`` imports nothing heavy.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

BAR_WIDTH = 30
REDRAW_SECONDS = 0.1


class ProgressBar:
    """``update(label, fraction)`` as the work goes; ``note(line)`` prints a line above the bar.

    Inactive (every call does nothing but ``note``'s print) unless ``enabled`` and the
    stream is a terminal.
    """

    def __init__(
        self, *, enabled: bool = True, stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.active = enabled and self.stream.isatty()
        self.clock = clock
        self.started = clock()  # when the current phase (label) began
        self.drawn_at = float("-inf")
        self.label = ""
        self.fraction = 0.0
        self.shown = ""  # the line on screen now ("" when none)

    def update(self, label: str, fraction: float) -> None:
        """The work named ``label`` is ``fraction`` (0 to 1) done."""
        if not self.active:
            return
        fraction = min(1.0, max(0.0, fraction))
        now = self.clock()
        if label != self.label:  # a new phase: its own clock, for its own estimate
            self.started = now
        changed = label != self.label or int(fraction * 100) != int(self.fraction * 100)
        self.label, self.fraction = label, fraction
        # A new percent at most ten times a second (its first and last always); the same one
        # once a second, for the clock.
        if now - self.drawn_at >= (REDRAW_SECONDS if changed else 1.0) or (changed and fraction in (0.0, 1.0)):
            self._draw(now)

    def note(self, line: str) -> None:
        """Print ``line`` (on a terminal, above the bar, which is redrawn under it)."""
        self._erase()
        print(line, file=self.stream, flush=True)
        if self.active and self.label:
            self._draw(self.clock())

    def close(self) -> None:
        self._erase()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def _draw(self, now: float) -> None:
        filled = round(self.fraction * BAR_WIDTH)
        elapsed = now - self.started
        line = (
            f"{self.label} [{'#' * filled}{'-' * (BAR_WIDTH - filled)}] {int(self.fraction * 100):3d}%  "
            f"{_duration(elapsed)}"
        )
        if 0.01 <= self.fraction < 1:
            line += f", about {_duration(elapsed * (1 - self.fraction) / self.fraction)} left"
        # Pad over what a longer previous line left on screen.
        self.stream.write("\r" + line.ljust(len(self.shown)))
        self.stream.flush()
        self.shown = line
        self.drawn_at = now

    def _erase(self) -> None:
        if self.shown:
            self.stream.write("\r" + " " * len(self.shown) + "\r")
            self.stream.flush()
            self.shown = ""


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"
