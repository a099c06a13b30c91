"""Checks that a loaded job document is plain, bounded data before any validation runs.

YAML can express things JSON cannot: aliases that expand a 400-byte file into gigabytes
("billion laughs"), binary blobs, dates, non-string keys. Everything Trainyard stores and
shows is JSON, so a document must be JSON-shaped, and small once expanded. JSON itself
lets through things that break later: lone UTF-16 surrogates (``"\\ud800"``), which no
UTF-8 response or file can hold; ``NaN`` and ``Infinity``; integers of thousands of
digits. Each is refused here, at its field.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass
from typing import Any

from trainyard.spec.errors import DOCUMENT, FieldError, SpecError, show
from trainyard.spec.nesting import MAX_DEPTH, too_deep

MAX_NODES = 20_000  # values in the document, aliases counted each time they are used
MAX_STRING = 256 * 1024
# Integers are stored and compared as 64-bit values (SQL BIGINT, JSON readers in other
# languages); anything beyond is a mistake, never a GPU count or a port.
MAX_INT = 2**63 - 1
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class OversizedNumber:
    """An integer literal the parser was not allowed to convert (Python refuses more than
    4,300 decimal digits); the loaders put this in its place so that it is reported at its
    field instead of failing the whole request."""

    digits: int


def _path(parent: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{parent}[{key}]"
    return key if parent == DOCUMENT else f"{parent}.{key}"


def plain_data(data: Any) -> Any:
    """Return ``data`` as plain JSON-compatible values, or raise SpecError saying where not.

    Dates and times (which YAML makes of unquoted ``2024-01-01``) become ISO strings.
    """
    budget = [MAX_NODES]

    def walk(value: Any, path: str, depth: int) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            raise SpecError.single(
                DOCUMENT,
                f"the job file is too large once expanded (more than {MAX_NODES} values; "
                "YAML aliases count each time they are used)",
            )
        if depth > MAX_DEPTH:
            raise too_deep(path)
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int):
            if not -MAX_INT - 1 <= value <= MAX_INT:
                raise SpecError.single(path, f"{_digits(value)}-digit integer; integers must fit in 64 bits")
            return value
        if isinstance(value, float):
            if not math.isfinite(value):
                raise SpecError.single(path, f"{value} is not allowed; numbers must be finite")
            return value
        if isinstance(value, OversizedNumber):
            raise SpecError.single(path, f"{value.digits}-digit integer; integers must fit in 64 bits")
        if isinstance(value, str):
            _check_text(value, path)
            return value
        if isinstance(value, dt.date | dt.datetime | dt.time):
            return value.isoformat()
        if isinstance(value, dict):
            result = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    raise SpecError.single(path, f"keys must be strings (got {show(key)})")
                _check_text(key, _path(path, key.encode("utf-8", "backslashreplace").decode()))
                result[key] = walk(item, _path(path, key), depth + 1)
            return result
        if isinstance(value, list):
            return [walk(item, _path(path, i), depth + 1) for i, item in enumerate(value)]
        kind = "binary data" if isinstance(value, bytes) else type(value).__name__
        raise SpecError([FieldError(path, f"{kind} is not allowed here; use text, numbers, lists and mappings")])

    return walk(data, DOCUMENT, 0)


def _check_text(text: str, path: str) -> None:
    if "\x00" in text:
        raise SpecError.single(path, "contains a NUL character")
    if len(text) > MAX_STRING:
        raise SpecError.single(path, f"is longer than {MAX_STRING} characters")
    if (match := _SURROGATE.search(text)) is not None:
        raise SpecError.single(
            path,
            f"contains a lone UTF-16 surrogate (\\u{ord(match.group()):04x} at character {match.start()}), "
            "which is not text; write the character itself, or a surrogate pair for one beyond U+FFFF",
        )


def _digits(value: int) -> int:
    """About how many decimal digits ``value`` has (``str()`` refuses very long ones)."""
    return int(abs(value).bit_length() * math.log10(2)) + 1
