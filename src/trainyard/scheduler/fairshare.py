"""Fair share over time: who goes first among jobs of one priority, by recent usage.

Slurm's multifactor fair-share factor and Kueue's admission fair sharing both rank waiting
work by how much its owner has used *recently*: usage decays with a half-life the admin
sets (``SchedulerConfig.fair_share_half_life``), so a user who ran 50 jobs last week is
not punished forever, and one who ran nothing goes ahead of one who ran much.

The measure is GPU-seconds decayed to now: a run of ``g`` GPUs from ``s`` to ``e`` counts
``g * ∫ 2^(-(now - t) / H) dt`` over ``[s, e]``. A user who keeps ``g`` GPUs busy for ever
approaches ``g * H / ln 2``. ``run_usage`` is that integral, ``UsageTally`` keeps the sum of
ended runs per key (decaying it lazily), and ``current_usage`` adds what running work has
received: the live controller and the simulator build the snapshot's ``usage`` and
``borrowed_usage`` with these same functions.

Ordering (``fair_order``): within one queue and priority, each user's jobs keep their own
order (least attained service, then submit time), and users are merged by their usage
plus, for each of their jobs already ahead in this order, one half-life of that job's
GPUs — so one user's 50 queued jobs and a colleague's one interleave instead of the 50
going first, and a heavy recent user waits behind light ones until the penalties of the
light users' queued jobs catch up.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_right
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence

from trainyard.core.resources import MILLI
from trainyard.scheduler.snapshot import PendingJob, RunningJob

# A CPU-only job uses no GPU, but still takes a turn: it counts as this many GPUs in the
# penalty, so that users with no usage alternate whatever their jobs ask.
_LEAST_GPUS = 0.01


def run_usage(gpus: float, start: float, end: float, now: float, half_life: float) -> float:
    """GPU-seconds of ``gpus`` GPUs held from ``start`` to ``end`` (cut at ``now``), decayed to ``now``."""
    if half_life <= 0:
        return 0.0
    end = min(end, now)
    if end <= start:
        return 0.0
    span = 2.0 ** (-(now - end) / half_life) - 2.0 ** (-(now - start) / half_life)
    return float(gpus * half_life / math.log(2) * span)


def decayed(value: float, elapsed: float, half_life: float) -> float:
    """``value`` ``elapsed`` seconds later."""
    if half_life <= 0:
        return 0.0
    return float(value * 2.0 ** (-max(0.0, elapsed) / half_life))


class UsageTally:
    """The decayed usage of ended runs, per key (a (VC, user) pair, or a VC's borrowed work).

    Each value is kept with the time it was last brought up to date and decayed when read,
    so adding a run costs O(1) whatever the number of keys.
    """

    def __init__(self, half_life: float) -> None:
        self.half_life = half_life
        self._values: dict[Hashable, tuple[float, float]] = {}  # key -> (value, as of)

    def add(self, key: Hashable, gpus: float, start: float, end: float) -> None:
        """Count a run that has ended (a task's, or a job's attempt's)."""
        if self.half_life <= 0 or gpus <= 0 or end <= start:
            return
        value, at = self._values.get(key, (0.0, end))
        at_new = max(at, end)
        value = decayed(value, at_new - at, self.half_life) + run_usage(gpus, start, end, at_new, self.half_life)
        self._values[key] = (value, at_new)

    def value(self, key: Hashable, now: float) -> float:
        found = self._values.get(key)
        if found is None:
            return 0.0
        value, at = found
        return decayed(value, now - at, self.half_life)

    def values(self, now: float) -> dict[Hashable, float]:
        """Every key's value at ``now``, leaving out those decayed to nothing."""
        out = {}
        for key in list(self._values):
            value = self.value(key, now)
            if value < 1e-6:
                del self._values[key]  # 2^-40 of a GPU-second: forgotten
                continue
            out[key] = value
        return out


def current_usage(
    tally: UsageTally, running: Iterable[RunningJob], now: float
) -> tuple[dict[tuple[str, str], float], dict[str, float]]:
    """The snapshot's ``usage`` (per (VC, user)) and ``borrowed_usage`` (per VC): the tally's
    ended runs (keyed ``(vc, user)`` and ``vc``) plus what running work has received since
    it last started. The caller adds each run to the tally when it ends, with both keys."""
    usage: dict[tuple[str, str], float] = {}
    borrowed: dict[str, float] = {}
    for key, value in tally.values(now).items():
        if isinstance(key, tuple):
            usage[key] = value
        else:
            borrowed[str(key)] = value
    for job in running:
        received = run_usage(job.gpus, job.started_at, now, now, tally.half_life)
        if received <= 0:
            continue
        usage[(job.vc, job.user)] = usage.get((job.vc, job.user), 0.0) + received
        if job.borrowed:
            borrowed[job.vc] = borrowed.get(job.vc, 0.0) + received
    return usage, borrowed


def record_end(tally: UsageTally, job: RunningJob, end: float) -> None:
    """Count a running job's run (from its last start to ``end``) once it has stopped."""
    tally.add((job.vc, job.user), job.gpus, job.started_at, end)
    if job.borrowed:
        tally.add(job.vc, job.gpus, job.started_at, end)


def fair_order(
    jobs: Sequence[PendingJob], usage: Mapping[tuple[str, str], float], half_life: float,
    group: Callable[[PendingJob], Hashable], *, by_vc: bool = True,
) -> tuple[list[PendingJob], dict[int, int]]:
    """``jobs`` (sorted by their own order) with the jobs of each ``group`` (a queue and a
    priority) reordered by fair share; the groups keep their places relative to each other.
    Also, for each job that other users' jobs now go ahead of, how many (for why-pending).

    Users are the principals, each within a VC; without VCs (``by_vc`` False: one pool,
    whatever VC a job names) a user is one principal, their usage summed over VCs."""
    if half_life <= 0 or len(jobs) < 2:
        return list(jobs), {}
    if len({(job.vc if by_vc else "", job.user) for job in jobs}) < 2:
        return list(jobs), {}  # one principal (a simulated trace without users): nothing to reorder
    if not by_vc:
        summed: dict[tuple[str, str], float] = {}
        for (_, user), value in usage.items():
            summed[("", user)] = summed.get(("", user), 0.0) + value
        usage = summed
    groups: dict[Hashable, list[PendingJob]] = {}
    for job in jobs:
        groups.setdefault(group(job), []).append(job)
    overtaken: dict[int, int] = {}
    reordered = {
        key: iter(_merged(members, usage, half_life, overtaken, by_vc)) for key, members in groups.items()
    }
    return [next(reordered[group(job)]) for job in jobs], overtaken


def _merged(
    jobs: list[PendingJob], usage: Mapping[tuple[str, str], float], half_life: float, overtaken: dict[int, int],
    by_vc: bool,
) -> list[PendingJob]:
    by_user: dict[tuple[str, str], list[PendingJob]] = {}
    for job in jobs:
        by_user.setdefault((job.vc if by_vc else "", job.user), []).append(job)
    if len(by_user) < 2:
        return jobs
    position = {job.job_id: i for i, job in enumerate(jobs)}
    # (the user's usage with the penalties of their jobs ahead, the job's own place, user, index)
    heap = [(usage.get(user, 0.0), position[queued[0].job_id], user, 0) for user, queued in by_user.items()]
    heapq.heapify(heap)
    out: list[PendingJob] = []
    # The original places of the jobs placed so far: those placed after every place before
    # them (most jobs), in a list that stays sorted as they are appended, and the others
    # in a tree that counts them.
    in_order: list[int] = []
    # The others, counted in a Fenwick tree (kept inline: at 100,000 waiting jobs most are
    # placed out of order, and a method call for each of its two walks cost ~6 % of the ordering).
    tree = [0] * (len(jobs) + 1)
    size = len(tree)
    latest = -1  # the latest original place placed so far
    while heap:
        value, place, user, index = heapq.heappop(heap)
        queued = by_user[user]
        job = queued[index]
        # Jobs placed before it that came after it: other users' (a user's own keep their
        # order). None if it comes after every job placed so far (most jobs: no count needed).
        if place < latest:
            i, before = place + 1, 0
            while i > 0:  # the others placed at or before ``place``
                before += tree[i]
                i -= i & -i
            ahead = len(out) - bisect_right(in_order, place) - before
            if ahead:
                overtaken[job.job_id] = ahead
            i = place + 1
            while i < size:  # and now this one
                tree[i] += 1
                i += i & -i
        else:
            latest = place
            in_order.append(place)
        out.append(job)
        if index + 1 < len(queued):
            penalty = max(_LEAST_GPUS, sum(t.gpu_milli for t in job.tasks) / MILLI) * half_life
            heapq.heappush(heap, (value + penalty, position[queued[index + 1].job_id], user, index + 1))
    return out


def gpu_hours(gpu_seconds: float) -> str:
    return f"{gpu_seconds / 3600:.1f} GPU-h"
