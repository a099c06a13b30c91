"""`yard doctor`'s vocabulary: one preflight check's verdict, and the report of all of them.

Each backend has its own checks (``local/doctor.py``, ``slurm/doctor.py``); both answer in
``Check``s, so that the command prints and scores them the same way: one line per check,
OK, WARN (works, but weaker or slower than it could be), FAIL (jobs will fail or users are
not kept apart) or SKIP (the check could not run, and the line says why), each WARN and FAIL
with the fix. The command exits non-zero when any check FAILs.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


class Status(enum.IntEnum):
    """A check's verdict, ordered from good to bad (a merged check takes the worst)."""

    OK = 0
    SKIP = 1
    WARN = 2
    FAIL = 3


@dataclass(frozen=True)
class Check:
    """One check: what was looked at, what was found, and, when it is not OK, what to do."""

    name: str
    status: Status
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class Account:
    """The OS account a Trainyard user's tasks run as, as the server's machine knows it
    (``uid``/``gid`` None: it does not exist here); on Slurm every node must agree."""

    user: str
    name: str
    uid: int | None
    gid: int | None


def ok(name: str, detail: str) -> Check:
    return Check(name, Status.OK, detail)


def warn(name: str, detail: str, fix: str) -> Check:
    return Check(name, Status.WARN, detail, fix)


def fail(name: str, detail: str, fix: str) -> Check:
    return Check(name, Status.FAIL, detail, fix)


def skip(name: str, why: str) -> Check:
    return Check(name, Status.SKIP, why)


def merged(name: str, parts: Sequence[Check], *, all_ok: str) -> Check:
    """Several nodes' verdicts on one check as one line: the worst status; the details and
    fixes of the parts that are not OK (each once), or ``all_ok`` when all are."""
    if not parts:
        return skip(name, "no node to check")
    worst = max(part.status for part in parts)
    if worst == Status.OK:
        return ok(name, all_ok)
    bad = [part for part in parts if part.status != Status.OK]
    fixes = "; ".join(_unique(p.fix for p in bad if p.fix))
    return Check(name, worst, "; ".join(_unique(p.detail for p in bad)), fixes)


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def render(checks: Sequence[Check]) -> str:
    """The report: ``STATUS  name: detail`` per check, its fix after ``fix:`` on the same
    line, and a last line that counts them."""
    lines = []
    width = max((len(check.name) for check in checks), default=0)
    for check in checks:
        line = f"{check.status.name:<4}  {check.name:<{width}}  {check.detail}"
        if check.fix and check.status >= Status.WARN:
            line += f" -- fix: {check.fix}"
        lines.append(line)
    counts = {status: sum(1 for c in checks if c.status == status) for status in Status}
    lines.append(", ".join(f"{counts[s]} {s.name}" for s in (Status.OK, Status.WARN, Status.FAIL, Status.SKIP)))
    return "\n".join(lines)


def exit_status(checks: Sequence[Check]) -> int:
    """1 when any check FAILs, else 0 (a WARN still lets jobs run)."""
    return 1 if any(check.status == Status.FAIL for check in checks) else 0
