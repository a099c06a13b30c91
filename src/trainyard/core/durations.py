"""Durations as people type them: ``90s``, ``15m``, ``1h``, ``7d``, ``2w``, or plain seconds."""

from __future__ import annotations

import re

UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_duration(text: str) -> float:
    """Seconds in ``text``; ValueError naming the accepted forms when it is not a duration."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration: use a number with s, m, h, d or w, e.g. 90s, 15m, 1h, 7d")
    return float(match.group(1)) * UNIT_SECONDS[match.group(2) or "s"]


def format_duration(seconds: float) -> str:
    """The largest whole unit that says ``seconds`` exactly: 3600 → ``1h``, 90 → ``90s``."""
    for unit in ("w", "d", "h", "m"):
        if seconds >= UNIT_SECONDS[unit] and seconds % UNIT_SECONDS[unit] == 0:
            return f"{int(seconds // UNIT_SECONDS[unit])}{unit}"
    return f"{seconds:g}s"
