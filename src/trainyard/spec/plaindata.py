"""Checks that a loaded job document is plain, bounded data before any validation runs.

YAML can express things JSON cannot: aliases that expand a 400-byte file into gigabytes
("billion laughs"), binary blobs, dates, non-string keys. Everything Trainyard stores and
shows is JSON, so a document must be JSON-shaped, and small once expanded.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from trainyard.spec.errors import DOCUMENT, FieldError, SpecError, show

MAX_NODES = 20_000  # values in the document, aliases counted each time they are used
MAX_DEPTH = 32
MAX_STRING = 256 * 1024


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
            raise SpecError.single(path, f"nested more than {MAX_DEPTH} levels deep")
        if isinstance(value, bool) or value is None or isinstance(value, int | float):
            return value
        if isinstance(value, str):
            if "\x00" in value:
                raise SpecError.single(path, "contains a NUL character")
            if len(value) > MAX_STRING:
                raise SpecError.single(path, f"is longer than {MAX_STRING} characters")
            return value
        if isinstance(value, dt.date | dt.datetime | dt.time):
            return value.isoformat()
        if isinstance(value, dict):
            result = {}
            for key, item in value.items():
                if not isinstance(key, str):
                    raise SpecError.single(path, f"keys must be strings (got {show(key)})")
                result[key] = walk(item, _path(path, key), depth + 1)
            return result
        if isinstance(value, list):
            return [walk(item, _path(path, i), depth + 1) for i, item in enumerate(value)]
        kind = "binary data" if isinstance(value, bytes) else type(value).__name__
        raise SpecError([FieldError(path, f"{kind} is not allowed here; use text, numbers, lists and mappings")])

    return walk(data, DOCUMENT, 0)
