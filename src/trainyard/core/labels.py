"""Node labels: what a label may look like, and how an admin's labels lie over the backend's.

A node's labels come from its backend (Slurm's state and partitions) or the configuration
(``node_labels``), and from admins (``yard node label``, ``PATCH /nodes/{name}/labels``),
stored apart so that the next inventory sync does not undo them. An admin's label wins;
an admin may also remove a label the backend reports (kept as a ``None`` that hides it),
as ``kubectl label … key-`` does. Resource expressions see the merged labels
(``node.labels``, ``core/selectors.py``). Standard library only: the CLI reads it too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

# Kubernetes' label syntax: an optional DNS-subdomain prefix and "/", then a name of at most
# 63 characters; a value of at most 63 characters (or empty). Letters, digits, "-", "_", ".".
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*"
LABEL_KEY = re.compile(rf"(?:{_PREFIX}/)?{_NAME}")
LABEL_VALUE = re.compile(rf"(?:{_NAME})?")
MAX_PREFIX = 253
MAX_LABELS = 64  # set by admins on one node
# Whether a node's GPUs can be shared (fractional ``gpu``), where its backend may say no:
# "false" from the Slurm backend on a node without ``shard`` GRES (docs/slurm.md, "GPUs").
# Absent or anything else: they can. Submit refuses a fraction when no node with GPUs can.
GPU_SHARES_LABEL = "trainyard.io/gpu-shares"


def merged_labels(reported: Mapping[str, str] | None, by_admin: Mapping[str, str | None] | None) -> dict[str, str]:
    """The labels a node has: the reported ones, then the admin's (``None``: removed)."""
    labels = dict(reported or {})
    for key, value in (by_admin or {}).items():
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
    return labels


def key_problem(key: str) -> str | None:
    """What is wrong with ``key`` as a label key, or None."""
    prefix = key.rpartition("/")[0]
    if not LABEL_KEY.fullmatch(key) or len(prefix) > MAX_PREFIX:
        return (f"{key!r} is not a label key: letters, digits, '-', '_' and '.', at most 63, starting and "
                "ending with a letter or digit, optionally after a DNS prefix and '/' (rack, example.com/ib)")
    return None


def value_problem(value: str) -> str | None:
    """What is wrong with ``value`` as a label value, or None."""
    if not LABEL_VALUE.fullmatch(value):
        return (f"{value!r} is not a label value: at most 63 letters, digits, '-', '_' and '.', starting and "
                "ending with a letter or digit (or empty)")
    return None


def parse_label_arguments(arguments: list[str]) -> dict[str, str | None]:
    """``["ib=true", "rack-"]`` (kubectl's form) as changes ``{"ib": "true", "rack": None}``;
    raises ValueError naming the argument that is neither."""
    changes: dict[str, str | None] = {}
    for argument in arguments:
        if "=" in argument:
            key, _, value = argument.partition("=")
            changes[key] = value
        elif argument.endswith("-") and len(argument) > 1:
            changes[argument[:-1]] = None
        else:
            raise ValueError(f"{argument!r}: write KEY=VALUE to set a label, KEY- to remove one")
    return changes
