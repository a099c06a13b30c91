"""Daily totals of measured use: closing UTC days, and a period's measured use read from the
closed days inside it plus the monitoring rows of the rest.

Why: the accounting rule (``monitor/accounting.py``, rule 2) cuts every monitoring row at its
task's next row, so summing a period from rows costs every row of it (a month of 1,000 tasks
is six million). The sums are additive over time: a row's span clipped to ``[since, until)``
is the sum of its pieces clipped to each day. So each day, once complete, is summed per task
once (``close_day``, run by the controller's history keeper every minute), and a report adds
the closed whole days inside its period to what the rows say of the rest: the partial days
at its edges and the days not closed yet (``measured_in``).

Closing a day, in steps:

1. A day closes once now is ``close_margin`` past its end (a few sampling intervals, at
   least 5 minutes): every round taken in it is written and its last buckets are averaged.
2. Its totals are ``measured_use`` over ``[day start, day end)`` for every task that ran in
   it, from the history as it is then (after that minute's downsampling and pruning).
3. The totals and the day's row are written in one transaction, and the day's row is its
   primary key: a crash before the commit leaves no trace (the next run sums the day again),
   and a second run finds the day closed and skips it. No day is lost or counted twice.
4. Days close in order, from the day after the newest closed one (at first, the oldest
   sample's day), so closed days leave no holes; a day nobody ran in closes with no totals.
5. Closed days older than ``keep_days`` (400 by default, ``usage_days_keep_days``) are
   removed; the history itself goes after 30 days, so a report over a year reads totals.

A closed day keeps the figures its rows gave when it closed; the history's later
downsampling and pruning no longer change them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from datetime import UTC, date, datetime, time, timedelta

from sqlalchemy.orm import Session

from trainyard.core.settings import DEFAULT_USAGE_DAYS_KEEP_DAYS
from trainyard.monitor.accounting import Period
from trainyard.store.queries import metrics as metric_queries
from trainyard.store.queries import usage as usage_queries
from trainyard.store.queries.usage import MeasuredRow
from trainyard.store.rows import TaskSampleRow

# A raw row stands for at most this many sampling intervals: rounds come a little late
# under load, but a longer gap is time nobody measured (the server was down).
RAW_SPAN_INTERVALS = 1.5
CLOSE_MARGIN_INTERVALS = 3  # step 1: the last rounds of a day are written within this many intervals
MIN_CLOSE_MARGIN = timedelta(minutes=5)  # and its last buckets averaged (``monitor.history.SETTLE``)
DAY = timedelta(days=1)


def raw_span_seconds(monitor_interval_seconds: float) -> float:
    return RAW_SPAN_INTERVALS * monitor_interval_seconds


def close_margin(monitor_interval_seconds: float) -> timedelta:
    return max(MIN_CLOSE_MARGIN, timedelta(seconds=CLOSE_MARGIN_INTERVALS * monitor_interval_seconds))


def day_start(day: date) -> datetime:
    return datetime.combine(day, time(), UTC)


def _reach_seconds(session: Session, raw_span: float) -> float:
    """How long before a period a row may have been taken and still reach into it."""
    return max(float(usage_queries.longest_row_seconds(session)), raw_span)


# --- Closing days ---------------------------------------------------------------------------


def days_to_close(
    session: Session, now: datetime, monitor_interval_seconds: float, sample_steps: Iterable[int],
    *, keep_days: int = DEFAULT_USAGE_DAYS_KEEP_DAYS,
) -> list[date]:
    """The days that may close now and are not closed yet, oldest first (steps 1 and 4);
    ``sample_steps``: the history's tiers, where the oldest sample is looked for."""
    last = (now - close_margin(monitor_interval_seconds)).date() - DAY
    newest = usage_queries.newest_closed_day(session)
    if newest is not None:
        first = newest + DAY
    else:
        oldest = [a for step in sample_steps
                  if (a := metric_queries.first_at(session, TaskSampleRow, step)) is not None]
        if not oldest:
            return []
        first = min(oldest).date()
    first = max(first, (now - timedelta(days=keep_days)).date())
    return [first + n * DAY for n in range((last - first).days + 1)]


def close_day(session: Session, day: date, now: datetime, monitor_interval_seconds: float) -> int:
    """Sum ``day``'s measured use per task and close it, in the caller's transaction (steps 2
    and 3); how many tasks had any."""
    start = day_start(day)
    runs = usage_queries.task_runs(session, start, start + DAY)
    raw_span = raw_span_seconds(monitor_interval_seconds)
    totals = [m for m in usage_queries.measured_use(
        session, {r.task.job_id for r in runs}, since=start, until=start + DAY, now=now, raw_span_seconds=raw_span,
        reach_seconds=_reach_seconds(session, raw_span),
    ) if m.gpu_seconds_measured or m.cpu_seconds_measured or m.gpu_seconds_used or m.cpu_core_seconds_used]
    usage_queries.add_closed_day(session, day, totals, now)
    return len(totals)


def forget_days(session: Session, now: datetime, keep_days: int = DEFAULT_USAGE_DAYS_KEEP_DAYS) -> int:
    """Remove the closed days older than ``keep_days`` (step 5); how many went."""
    return usage_queries.delete_days_before(session, (now - timedelta(days=keep_days)).date())


# --- Reading a period -----------------------------------------------------------------------


def measured_in(
    session: Session, job_ids: Collection[int], period: Period, monitor_interval_seconds: float
) -> list[MeasuredRow]:
    """What these jobs' tasks were measured to use in the period, per task: the closed whole
    days inside it from their totals, the rest (edges, days not closed) from the rows."""
    if not job_ids:
        return []
    end = min(period.until, period.now)
    first = period.since.date() if period.since == day_start(period.since.date()) else period.since.date() + DAY
    last = end.date() - DAY  # the last day that ends by ``end``
    closed = usage_queries.closed_days(session, first, last) if first <= last else []
    parts: list[list[MeasuredRow]] = []
    if closed:
        parts.append(usage_queries.day_totals(session, job_ids, closed[0], closed[-1]))
    raw_span = raw_span_seconds(monitor_interval_seconds)
    reach = _reach_seconds(session, raw_span)
    for since, until in _rest(period.since, period.until, closed):
        parts.append(usage_queries.measured_use(session, job_ids, since=since, until=until, now=period.now,
                                                raw_span_seconds=raw_span, reach_seconds=reach))
    return _summed(parts)


def _rest(since: datetime, until: datetime, closed: list[date]) -> list[tuple[datetime, datetime]]:
    """``[since, until)`` less the closed days (which lie inside it, in order)."""
    rest, cursor = [], since
    for day in closed:
        if day_start(day) > cursor:
            rest.append((cursor, day_start(day)))
        cursor = day_start(day) + DAY
    if cursor < until:
        rest.append((cursor, until))
    return rest


def _summed(parts: list[list[MeasuredRow]]) -> list[MeasuredRow]:
    if len(parts) == 1:
        return parts[0]
    sums: dict[tuple[int, int, str, int], list[float]] = {}
    for part in parts:
        for m in part:
            figures = sums.setdefault((m.job_id, m.attempt, m.role, m.index), [0.0, 0.0, 0.0, 0.0])
            figures[0] += m.gpu_seconds_used
            figures[1] += m.gpu_seconds_measured
            figures[2] += m.cpu_core_seconds_used
            figures[3] += m.cpu_seconds_measured
    return [MeasuredRow(*key, *figures) for key, figures in sums.items()]
