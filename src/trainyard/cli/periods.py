"""Moments on the command line (``--since 7d``, ``--until 2026-11-01``): standard library
only, since the parser imports it before it knows which command runs."""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime, timedelta

_AGO = re.compile(r"(\d{1,6})([mhdw])")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def moment(text: str, *, now: datetime | None = None) -> datetime:
    """``30m``, ``12h``, ``7d``, ``2w`` ago; or an ISO date (midnight UTC) or date and time
    (UTC when it names no zone). An argparse type: a bad value exits 2 naming the flag."""
    if match := _AGO.fullmatch(text.strip()):
        count, unit = match.groups()
        return (now or datetime.now(UTC)) - timedelta(**{_UNITS[unit]: int(count)})
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a time ago (30m, 12h, 7d, 2w) nor a date (2026-11-01) or date and time "
            "(2026-11-01T08:00, UTC unless it names a zone)"
        ) from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed
