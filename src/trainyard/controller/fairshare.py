"""Recent usage for fair share, kept by the controller for the scheduler's snapshot.

The scheduler ranks users within a VC and priority, and borrowing VCs among themselves,
by their GPU usage decayed with the configured half-life (``scheduler.fairshare``; the
snapshot's ``usage`` and ``borrowed_usage``). The controller keeps that usage in one
``UsageTally``:

* **bootstrapped** once, at its first schedule step after a start, from the store: every
  attempt that ended within the last ``HORIZON_HALF_LIVES`` half-lives, with its tasks'
  GPUs, its start and end, its VC and owner and whether it ran borrowed. A restart thus
  loses nothing but runs older than that (decayed to a thousandth);
* **kept up to date** without reading history again: each schedule step compares the
  running work with what it knew (the last step's running work and the jobs it started);
  a run that has gone (its job no longer holds GPUs, or holds them in a later attempt) is
  added with its attempt's end (one query for those runs alone).

Running work itself is never in the tally: ``current_usage`` adds what it has received so
far, so a run is counted once, whether it ends before or after a restart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime

from sqlalchemy.orm import Session

from trainyard.controller.world import RunningWork
from trainyard.scheduler.fairshare import UsageTally, current_usage, record_end
from trainyard.scheduler.snapshot import RunningJob
from trainyard.services.usage import RECENT_HALF_LIVES
from trainyard.store.queries import jobs as job_queries

# How far back the bootstrap reads (as far as `yard usage`'s recent figures): a run that
# ended this many half-lives ago weighs 2^-10.
HORIZON_HALF_LIVES = RECENT_HALF_LIVES

Usage = tuple[dict[tuple[str, str], float], dict[str, float]]  # the snapshot's usage, borrowed_usage


class FairShareUsage:
    """The controller's tally of ended runs and the runs it has seen running."""

    def __init__(self, half_life: float) -> None:
        self.half_life = half_life
        self.tally: UsageTally | None = None  # None until bootstrapped
        # Job id -> (its run as last seen, the number of the attempt that runs it).
        self._known: dict[int, tuple[RunningJob, int]] = {}
        # (job id, attempt) -> since when an elastic job, resized in that attempt, has its size.
        self._sizes: dict[tuple[int, int], float] = {}

    @property
    def enabled(self) -> bool:
        return self.half_life > 0

    def usage(self, session: Session, work: RunningWork, now: float) -> Usage:
        """The snapshot's ``usage`` and ``borrowed_usage`` as of ``now``: bootstraps the
        tally the first time, then adds the runs that have ended since the last call."""
        if not self.enabled:
            return {}, {}
        if self.tally is None:
            self.tally = self._bootstrap(session, now)
        gone = [
            (run, number) for job_id, (run, number) in self._known.items()
            if work.attempts.get(job_id) != number
        ]
        ends = job_queries.attempt_ends(session, [(run.job_id, number) for run, number in gone]) if gone else {}
        self.add_ended(gone, ends, now)
        running = self._sized(work, now)
        self._known = {job.job_id: (job, work.attempts[job.job_id]) for job in running}
        return current_usage(self.tally, running, now)

    def _sized(self, work: RunningWork, now: float) -> list[RunningJob]:
        """The running work, each elastic job resized within its attempt counted from its
        resize on: the run at its earlier size goes into the tally as ended now (seen at the
        first cycle after the resize), so that each size counts for the time it held."""
        sizes: dict[tuple[int, int], float] = {}
        running = []
        for job in work.running:
            number = work.attempts[job.job_id]
            since = self._sizes.get((job.job_id, number))
            known = self._known.get(job.job_id)
            if known is not None and known[1] == number and known[0].gpus != job.gpus:
                assert self.tally is not None
                record_end(self.tally, known[0], now)
                since = now
            if since is not None:
                sizes[(job.job_id, number)] = since
                job = replace(job, started_at=max(job.started_at, since))
            running.append(job)
        self._sizes = sizes
        return running

    def add_ended(
        self, gone: Iterable[tuple[RunningJob, int]], ends: Mapping[tuple[int, int], datetime], now: float
    ) -> None:
        """Count runs that have stopped, each at its attempt's end where known, else ``now``."""
        assert self.tally is not None
        for run, number in gone:
            end = ends.get((run.job_id, number))
            record_end(self.tally, run, now if end is None else min(now, end.timestamp()))

    def started(self, runs: Iterable[tuple[RunningJob, int]]) -> None:
        """Runs the controller has just started (with their attempts' numbers): one that
        ends before the next schedule step sees it running is still counted."""
        if self.enabled and self.tally is not None:
            for run, number in runs:
                self._known[run.job_id] = (run, number)

    def _bootstrap(self, session: Session, now: float) -> UsageTally:
        tally = UsageTally(self.half_life)
        since = datetime.fromtimestamp(max(0.0, now - self.half_life * HORIZON_HALF_LIVES), UTC)
        attempts: dict[tuple[int, int], tuple[str, str, float, float, bool, float]] = {}
        for job_id, number, vc, user, started, finished, borrowed, gpus, task_start, task_end, elastic in (
            job_queries.ended_attempt_runs(session, since)
        ):
            milli = sum(m for _, m in gpus or ())
            if elastic:  # its workers came and went: each counts for its own time
                start, end = (task_start or started).timestamp(), (task_end or finished).timestamp()
                tally.add((vc, user), milli / 1000, start, min(end, now))
                if borrowed:
                    tally.add(vc, milli / 1000, start, min(end, now))
                continue
            key = (job_id, number)
            known = attempts.get(key)
            total = milli / 1000 + (known[5] if known else 0.0)
            attempts[key] = (vc, user, started.timestamp(), finished.timestamp(), bool(borrowed), total)
        for vc, user, start, end, borrowed, total in attempts.values():
            tally.add((vc, user), total, start, min(end, now))
            if borrowed:
                tally.add(vc, total, start, min(end, now))
        return tally
