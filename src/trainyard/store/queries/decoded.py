"""JSON columns that a scrape reads for every node and task, read as their text and decoded
once per distinct text.

A node's GPU list changes when its inventory does, a task's GPU shares never (a task row
keeps its placement); yet ``GET /metrics`` read and decoded all of them on every scrape, a
fifth of its time for 1,000 nodes and 2,000 tasks. Keyed by the stored text itself, a decoded
value is always what decoding that text again would give: nothing goes stale, whichever
process or thread asks. The caches are bounded (least recently used go first).
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from sqlalchemy import Text, cast

# Distinct texts kept: a node's GPU list is a few hundred bytes per GPU, so at most some
# tens of MiB for the largest cluster; the shares of a task are a few bytes each.
NODE_GPU_LISTS = 16_384
TASK_SHARE_LISTS = 16_384


def as_text(column: Any) -> Any:
    """A JSON column as the text stored (SQLite keeps it so; PostgreSQL's driver would
    otherwise decode it itself)."""
    return cast(column, Text)


@lru_cache(maxsize=NODE_GPU_LISTS)
def device_models(text: str) -> tuple[tuple[int, str], ...]:
    """(device index, model) of each GPU of a ``NodeRow.gpus`` text."""
    return tuple((gpu["index"], gpu["model"]) for gpu in json.loads(text))


@lru_cache(maxsize=TASK_SHARE_LISTS)
def gpu_shares(text: str) -> tuple[tuple[int, int], ...]:
    """(device index, milli) of each share of a ``TaskRow.gpus`` text."""
    return tuple((index, milli) for index, milli in json.loads(text))
