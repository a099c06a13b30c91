"""The controller: one thread that reconciles and schedules, woken by changes or a tick."""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import replace

from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from trainyard.backends.base import Backend, DatasetCaches, JobDirectories, MetricsSource, TaskEndNotices
from trainyard.controller import elastic
from trainyard.controller.alerting import AlertEvaluator, Receivers
from trainyard.controller.datasets import DatasetPrefetcher
from trainyard.controller.dependencies import hold_back
from trainyard.controller.fairshare import FairShareUsage
from trainyard.controller.history import HistoryKeeper
from trainyard.controller.inventory import sync_inventory
from trainyard.controller.jobdirs import JobDirCap, JobDirSweeper, WorkdirSweeper
from trainyard.controller.limits import end_overdue_attempts
from trainyard.controller.monitoring import Monitoring
from trainyard.controller.reconcile import Reconciler
from trainyard.controller.retries import hold_back as hold_back_retries
from trainyard.controller.schedule_worker import ScheduleRunner
from trainyard.controller.scheduling import (
    PortPlan,
    WaitingJobs,
    apply_decisions,
    preempt_jobs,
)
from trainyard.controller.sessions import SessionWatch, settle_lifetimes
from trainyard.controller.sweep_limits import hold_back as hold_back_sweeps
from trainyard.controller.watchdog import Watchdog
from trainyard.controller.world import (
    held_ports,
    running_work,
    user_groups,
    user_quotas,
    virtual_clusters,
)
from trainyard.core.clock import Clock
from trainyard.core.retention import DEFAULT_RETENTION_TIERS, RetentionTier
from trainyard.core.sessions import SessionPolicy
from trainyard.core.settings import (
    DEFAULT_JOB_DIR_RETENTION_SECONDS,
    DEFAULT_MONITOR_INTERVAL_SECONDS,
    DEFAULT_USAGE_DAYS_KEEP_DAYS,
)
from trainyard.core.wiring import PEER_PORT_LABEL
from trainyard.monitor.exposition import ControllerTimings
from trainyard.scheduler.snapshot import (
    Decisions,
    KeepWaiting,
    PendingJob,
    RunningJob,
    SchedulerConfig,
    Snapshot,
    StartJob,
    TaskPlacement,
)
from trainyard.services import node_view
from trainyard.services.environments import settle_builds
from trainyard.services.specs import StoredSpecs
from trainyard.services.workdirs import WorkdirStore
from trainyard.spec.models import JobSpec
from trainyard.store.db import Database, write_first, writer_wait_seconds
from trainyard.store.queries import jobs as job_queries
from trainyard.store.rows import JobRow

log = logging.getLogger(__name__)

INVENTORY_REFRESH_SECONDS = 30.0
FULL_SCHEDULE_SECONDS = 10.0
MIN_CYCLE_GAP = 0.05
# Under a burst of wakes, the next cycle waits, after the last one ended, this many times
# the CPU time that cycle took: the controller takes at most about a third of a core from
# the submits that wake it (a cycle's cost grows with the queue they make). CPU time, not
# wall time: a cycle waiting on a slow backend or the store costs the submits nothing.
CYCLE_GAP_PER_CYCLE_CPU = 2.0
# With the scheduler in a worker process (``schedule_worker.py``) the computation that grows
# with the queue costs this interpreter nothing; what is left in the thread's CPU time is the
# store's work for what the cycle did (tasks seen ending, jobs placed and launched, reasons
# written) and the snapshot's reading and pickling (about 0.04 s at 4,500 waiting jobs). So
# the gap shrinks to once the thread's CPU time: the controller takes at most about half
# the interpreter under a burst — the trade: a submit burst's throughput for admission
# latency. The worker's own seconds count a quarter, so that it leaves a fifth of a second
# core to the store and to whatever else runs on the machine.
CYCLE_GAP_PER_CYCLE_CPU_WITH_WORKER = 1.0
CYCLE_GAP_PER_WORKER_SECOND = 0.25
# Those gaps are for the submits: they apply only while the API's work arrives — a wake from
# the API (``wake``) since the cycle began. Once the submits stop, the next cycle comes as
# soon as something asks for one (a task's end a backend announces, ``TaskEndNotices``, or
# the cycle's own ``more``): after a burst the controller no longer idles through a gap
# that keeps the interpreter for requests nobody is making (issue 33).
# ``yard up``'s ``reason_refresh_seconds``: under a burst, the positions and messages of most
# waiting jobs change every cycle ("12th in VC a"): at 3,000 waiting, 1,500-2,200 rows
# rewritten a cycle, 0.1-0.4 s of the cycle's writing, holding SQLite's one writer (issue 33).
# A changed reason is still written at once; a position or message that changed alone is at
# most this old.
REASON_REFRESH_SECONDS = 5.0


class Controller:
    """Runs ``run_once`` in a background thread; ``wake`` asks for a cycle now.

    Every state change of jobs made outside the API happens here, in one thread, so the
    controller never races itself; races with the API are caught by the jobs' version
    column and retried on the next cycle.
    """

    def __init__(
        self,
        db: Database,
        backend: Backend,
        clock: Clock,
        *,
        interval: float = 0.5,
        config: SchedulerConfig | None = None,
        specs: StoredSpecs | None = None,
        job_dir_retention_seconds: float = DEFAULT_JOB_DIR_RETENTION_SECONDS,
        monitor_interval_seconds: float = DEFAULT_MONITOR_INTERVAL_SECONDS,
        alert_interval_seconds: float = 30.0,
        alert_receivers: Receivers | None = None,
        monitor_retention: tuple[RetentionTier, ...] = DEFAULT_RETENTION_TIERS,
        usage_days_keep_days: int = DEFAULT_USAGE_DAYS_KEEP_DAYS,
        session_policy: SessionPolicy | None = None,
        job_dir_max_bytes: int | None = None,
        workdirs: WorkdirStore | None = None,
        scheduler_worker: bool = False,
        reason_refresh_seconds: float = 0.0,
        retry_backoff_seconds: float = 0.0,
    ) -> None:
        self.db = db
        self.config = config or SchedulerConfig()
        self.backend = backend
        self.clock = clock
        self.interval = interval
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # The one cache of parsed job files, shared with the API (api/server.py).
        self.specs = specs if specs is not None else StoredSpecs()
        self._dirty = True
        self._last_inventory = -1e9
        self._last_schedule = -1e9
        # Histograms for /metrics: cycle durations here, first-start latencies in reconcile.
        self.timings = ControllerTimings()
        self.reconciler = Reconciler(db, backend, clock, self.spec_of, self.timings, workdirs)
        self.workdirs = workdirs
        self.watchdog = Watchdog(db, backend, clock)
        self.waiting = WaitingJobs(self.specs)
        # A failed or lost attempt's job waits this long before its next (doubling each time,
        # controller/retries.py): ``yard up``'s ``job_retry_backoff_seconds``; 0 (the tests'
        # default) retries at once.
        self.waiting.retry_backoff = retry_backoff_seconds
        # Recent usage per (VC, user) and VC's borrowed work, for fair share (fairshare.py).
        self.fair_share = FairShareUsage(self.config.fair_share_half_life)
        # When consolidation's moves were made (``Preempt.move``), for its budget per hour
        # (``Snapshot.recent_moves``); kept in memory: a restart gives a whole hour's budget again.
        self._moves: collections.deque[float] = collections.deque()
        self.job_dirs = (
            JobDirSweeper(db, backend, clock, job_dir_retention_seconds)
            if isinstance(backend, JobDirectories)
            else None
        )
        self.job_dir_cap = (
            JobDirCap(db, backend, clock, job_dir_max_bytes)
            if isinstance(backend, JobDirectories) and job_dir_max_bytes is not None
            else None
        )
        self.monitoring = (
            Monitoring(db, backend, clock, monitor_interval_seconds) if isinstance(backend, MetricsSource) else None
        )
        self.alerts = AlertEvaluator(db, clock, alert_interval_seconds, alert_receivers or Receivers(),
                                     on_cordon=self.wake, monitor_interval_seconds=monitor_interval_seconds)
        self.history = HistoryKeeper(db, clock, monitor_retention, monitor_interval_seconds=monitor_interval_seconds,
                                     usage_days_keep_days=usage_days_keep_days)
        self.session_watch = SessionWatch(db, clock, session_policy or SessionPolicy(), backend)
        # The work beside the loop, each in a thread of its own when due (periodic.py): started
        # after every tick, and waited for at stop, since a round half written when the store
        # closes would only log noise.
        self.workdir_sweeper = WorkdirSweeper(db, workdirs, clock) if workdirs is not None else None
        self.prefetcher = DatasetPrefetcher(db, backend, clock, self.specs) if isinstance(backend, DatasetCaches) \
            else None
        self._periodics = [p for p in (self.job_dirs, self.job_dir_cap, self.monitoring, self.alerts, self.history,
                                       self.session_watch, self.workdir_sweeper, self.prefetcher) if p is not None]
        self.cycles = 0
        # Where ``schedule(snapshot)`` runs: a worker process of its own (``yard up``'s
        # default, setting ``scheduler_worker``) or this thread (the tests' default).
        self.scheduler = ScheduleRunner(worker=scheduler_worker)
        self._worker_seconds = 0.0  # the last cycle's wait for the worker
        # A waiting job's pending message, position and estimate that change while its reason
        # stays are written again no more often than this (its reason at once): ``yard up``'s
        # REASON_REFRESH_SECONDS; 0 (the tests' default) writes every change at once.
        self.reason_refresh_seconds = reason_refresh_seconds
        self._waits: tuple[KeepWaiting, ...] = ()  # the last schedule's, to write (``_write_reasons``)
        self._api_woke = -1e9  # when the API last woke it (``wake``), time.monotonic(): for the gap
        self._steps: dict[str, float | int] = {}  # the last cycle's seconds per step and counts, for the debug line

    def spec_of(self, job: JobRow) -> JobSpec:
        return self.specs.of(job)

    def wake(self) -> None:
        """A cycle soon: the API (or an alert) changed something the controller acts on."""
        self._api_woke = time.monotonic()
        self._dirty = True
        self._wake.set()

    def _again(self) -> None:
        """A full cycle soon, asked by the controller itself (no gap for submits: ``_run``)."""
        self._dirty = True
        self._wake.set()

    def _task_ended(self) -> None:
        """A backend says a task may have ended (``TaskEndNotices``): a cycle now, whose
        reconcile sees the end and asks for the schedule if it was one."""
        self._wake.set()

    def start(self) -> None:
        self.scheduler.start()
        if isinstance(self.backend, TaskEndNotices):
            self.backend.on_task_end(self._task_ended)
        self._thread = threading.Thread(target=self._run, name="trainyard-controller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        for periodic in self._periodics:
            periodic.join(timeout=10)
        self.scheduler.stop()

    def _run(self) -> None:
        write_first()  # its transactions before the submits' (store/db.py: _WriterLock)
        while not self._stop.is_set():
            started, cpu, waited = time.monotonic(), time.thread_time(), writer_wait_seconds()
            self._worker_seconds = 0.0
            try:
                self.run_once()
            except StaleDataError:
                log.info("a job changed under the controller; retrying the cycle")
                self._dirty = True
                continue
            except Exception:  # noqa: BLE001 - the loop must outlive any one bad cycle
                log.exception("controller cycle failed")
            ended, cpu, waited = time.monotonic(), time.thread_time() - cpu, writer_wait_seconds() - waited
            self._wake.wait(self.interval)
            # Under a burst of submissions, wakes arrive faster than cycles: let them
            # coalesce into one cycle per MIN_CYCLE_GAP (and no sooner than
            # CYCLE_GAP_PER_CYCLE_CPU times its CPU time after the last one) rather than one
            # per request. An idle controller still reacts at once.
            now = time.monotonic()
            per_cpu = CYCLE_GAP_PER_CYCLE_CPU_WITH_WORKER if self.scheduler.worker else CYCLE_GAP_PER_CYCLE_CPU
            gap = per_cpu * cpu + CYCLE_GAP_PER_WORKER_SECOND * self._worker_seconds
            if self._api_woke < started:  # no request since the cycle began: no one to leave the interpreter to
                gap = 0.0
            rest = max(MIN_CYCLE_GAP - (now - started), gap - (now - ended))
            if log.isEnabledFor(logging.DEBUG):
                steps = " ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in self._steps.items())
                log.debug("cycle: %.3f s, %.3f s of this thread's CPU, %.3f s in the scheduler's worker, %.3f s "
                          "waiting for the store's writer; steps (s) and counts: %s; next in %.3f s",
                          ended - started, cpu, self._worker_seconds, waited, steps, max(0.0, rest) + now - ended)
            if rest > 0:
                self._stop.wait(rest)
            self._wake.clear()

    def run_once(self) -> None:
        """One full cycle: inventory (when due), run-time limits and sessions' lifetimes, the
        hang watchdog (when due), reconcile, schedule, launch, settle ended environment builds; job-directory
        sweeps and monitoring rounds start in their own threads when due."""
        self.cycles += 1
        self._steps = {}
        mark = time.perf_counter()

        def step(name: str) -> None:  # the seconds since the last step ended, for the debug line
            nonlocal mark
            now = time.perf_counter()
            self._steps[name] = self._steps.get(name, 0.0) + now - mark
            mark = now

        mono = self.clock.monotonic()
        if mono - self._last_inventory >= INVENTORY_REFRESH_SECONDS:
            self._refresh_inventory(mono)
        with self.db.session() as session:
            if end_overdue_attempts(session, self.clock):
                self._dirty = True
            if settle_lifetimes(session, self.clock):  # interactive sessions past their lifetime
                self._dirty = True
        if self.watchdog.end_hung_attempts_if_due():
            self._dirty = True
        step("limits")
        lost = self.reconciler.lost
        if self.reconciler.run():
            self._dirty = True
        step("reconcile")
        if self.reconciler.lost != lost:
            # A task whose end nobody knows (a LOST one) may have lost its node: the retry
            # must not be placed there from an inventory up to INVENTORY_REFRESH_SECONDS old,
            # only to be lost again (Slurm: NODE_FAIL, then ReqNodeNotAvail) until its
            # platform retries are spent.
            self._refresh_inventory(mono)
        if self._dirty or mono - self._last_schedule >= FULL_SCHEDULE_SECONDS:
            self._dirty = False
            self._last_schedule = mono
            placed = self._schedule()
            step("schedule")
            if placed:
                # Launch what was just placed, and stop what was preempted, without waiting
                # for the next tick: a pass over those jobs alone (issue 33: a full pass read
                # and observed every running job again, after the cycle's own reconcile).
                self.reconciler.run(only=placed)
                step("launch")
            self._write_reasons()
            step("w.reasons")
        with self.db.session() as session:
            # Level-triggered like the rest: an environment whose build job has ended, however
            # it ended (its tasks, a stop while it waited, its owner's removal), is settled here.
            for name in settle_builds(session, self.clock):
                log.info("environment %s: its build has ended", name)
        for periodic in self._periodics:
            periodic.start_if_due()
        step("rest")

    def _refresh_inventory(self, mono: float) -> None:
        nodes = self.backend.inventory()
        with self.db.session() as session:
            if sync_inventory(session, self.backend.name, nodes, self.clock):
                self._dirty = True
        self._last_inventory = mono

    def _schedule(self) -> set[int]:
        """The schedule step; returns the jobs it started, preempted or resized."""
        began = time.perf_counter()  # a real duration, whatever clock the controller runs on
        self._waits = ()
        with self.db.session() as session:
            now = self.clock.now().timestamp()
            prefetcher = self.prefetcher
            pending = self.waiting.load(session, now, prefetcher.data_nodes if prefetcher is not None else None,
                                        prefetcher.arriving if prefetcher is not None else None)
            gate = hold_back(session, pending, self.waiting.dependencies)
            pending, backing_off = hold_back_retries(gate.ready, self.waiting.retry_at, now)
            cannot_start = {**self.waiting.broken, **gate.never}
            if not pending and not cannot_start and not gate.waits and not backing_off \
                    and not job_queries.elastic_running(session):
                return set()  # nothing to start, fail, explain or grow
            pending, capped = hold_back_sweeps(session, pending)
            nodes = tuple(node_view.node_states(session, in_use=True))
            held = held_ports(session)
            work = running_work(session)
            running = elastic.describe(session, work, self.spec_of)
            usage, borrowed_usage = self.fair_share.usage(session, work, now)
            snapshot = Snapshot(
                nodes=nodes,
                pending=pending,
                now=now,
                vcs=virtual_clusters(session),
                user_quotas=user_quotas(session),
                running=running,
                preempting=work.ending,
                user_groups=user_groups(session),
                usage=usage,
                borrowed_usage=borrowed_usage,
                config=self.config,
                recent_moves=self._recent_moves(now),
            )
        read = time.perf_counter()
        decisions = self.scheduler.decide(snapshot)
        decided = time.perf_counter()
        self._steps["s.read"] = read - began
        self._steps["s.decide"] = decided - read
        self._worker_seconds = self.scheduler.worker_seconds
        if gate.waits or capped or backing_off:
            decisions = replace(decisions, waits=(*decisions.waits, *gate.waits, *backing_off, *capped))
        if decisions.more:  # the cycle stopped at its bound of starts: the rest are tried at once
            self._again()
        if capped and decisions.starts:
            # A sweep's held jobs said how many of it ran before these started: say it again
            # next cycle, not at the next full schedule.
            self._dirty = True
        ports = {}
        no_ports: dict[int, str] = {}
        for start in decisions.starts:
            try:
                ports[start.job_id] = self._ports_for(start, self._starting_spec(start.job_id), held)
            except OSError as error:  # other programs hold the ports, out of file descriptors…
                # The node's fault, not the job's, and likely passing: it keeps waiting, with
                # the reason, and is placed again (maybe elsewhere) by the next full cycle (10 s), not
                # at every tick while the ports stay taken.
                log.warning("cannot reserve ports for job %s: %s", start.job_id, error)
                no_ports[start.job_id] = str(error)
        grow_ports = {}
        if decisions.grows:
            with self.db.session() as session:
                rows = job_queries.jobs_by_ids(session, [g.job_id for g in decisions.grows])
                for g in decisions.grows:
                    if g.job_id in rows:
                        try:
                            grow_ports[g.job_id] = self._task_ports(g.placements, self.spec_of(rows[g.job_id]), held)
                        except OSError as error:  # the ports are taken: it grows in a later cycle
                            log.warning("cannot reserve ports to grow job %s: %s", g.job_id, error)
        # The placements first, launched next (``run_once``), and the pending reasons of the
        # jobs that still wait last, in a transaction of their own (``_write_reasons``): at
        # thousands of waiting jobs their rows took up to a second to write under a burst
        # (issue 33), and a placed job's launch waited for them.
        self._waits = decisions.waits
        if self.prefetcher is not None:  # where reserved jobs will run: their datasets go there first
            self.prefetcher.reserved = {w.job_id: w.reserved_nodes for w in decisions.waits if w.reserved_nodes}
        with self.db.session() as session:
            started, written = apply_decisions(
                session, replace(decisions, waits=()), self.waiting.written, ports, self.clock, cannot_start, no_ports
            )
            preempted = preempt_jobs(session, decisions.preemptions, self.clock, self.spec_of)
            self._moves.extend(now for p in decisions.preemptions if p.move)
            resized = elastic.grow(session, [g for g in decisions.grows if g.job_id in grow_ports], grow_ports,
                                   self.clock)
            resized += elastic.shrink(session, decisions.shrinks, self.clock)
            if started and self.fair_share.enabled:
                self.fair_share.started(_started_runs(session, decisions.starts, started, pending, now))
        self.waiting.written.update(written)  # PORTS reasons
        self.waiting.started(started)
        self._steps["s.write"] = time.perf_counter() - decided
        self._steps["waiting"] = len(snapshot.pending)
        self.timings.cycle.observe(time.perf_counter() - began)
        return {*started, *preempted, *resized}

    def _recent_moves(self, now: float) -> int:
        """Consolidation's moves in the hour before ``now``."""
        while self._moves and self._moves[0] <= now - 3600.0:
            self._moves.popleft()
        return len(self._moves)

    def _write_reasons(self) -> None:
        """The last schedule's reasons of the jobs that still wait, where they changed; a
        message, position or estimate that changed alone is rewritten once its last write
        is ``reason_refresh_seconds`` old (a half to the whole of it, by job id, so that
        the jobs written in one cycle do not all come due in one later cycle)."""
        waits, self._waits = self._waits, ()
        if not waits:
            return
        mono = self.clock.monotonic()
        refreshed, every = self.waiting.refreshed, self.reason_refresh_seconds
        recent = ({job for job, at in refreshed.items() if mono - at < every * (0.5 + job % 8 / 16)}
                  if every > 0 else set())
        with self.db.session() as session:
            _, written = apply_decisions(session, Decisions(waits=waits), self.waiting.written, {}, self.clock,
                                         recent=recent)
        self.waiting.written.update(written)
        refreshed.update(dict.fromkeys(written, mono))
        self._steps["reasons"] = len(written)

    def _starting_spec(self, job_id: int) -> JobSpec:
        """The spec of a job about to start: parsed when it was loaded as waiting, and read
        again only if the bounded cache has let it go since (with more waiting jobs than it keeps)."""
        spec = self.specs.known(job_id)
        if spec is None:
            with self.db.session() as session:
                job = job_queries.job_by_id(session, job_id)
                assert job is not None  # it waited a moment ago, and jobs are not deleted
                spec = self.spec_of(job)
        return spec

    def _ports_for(self, start: StartJob, spec: JobSpec, held: dict[str, set[int]]) -> PortPlan:
        """The job's ports, none held by a live task on its node (nor given to another job
        of this cycle: ``held`` gains them)."""
        master = spec.role_names[0]
        master_node = next(p.node for p in start.placements if (p.role, p.index) == (master, 0))
        plan = self._task_ports(start.placements, spec, held)
        taken = held.setdefault(master_node, set())
        master_port = self.backend.allocate_ports(master_node, 1, taken)[0]
        taken.add(master_port)
        return PortPlan(master_port=master_port, ports=plan)

    def _task_ports(self, placements: Sequence[TaskPlacement], spec: JobSpec,
                    held: dict[str, set[int]]) -> dict[tuple[str, int], dict[str, list[int]]]:
        """Each task's own ports: its role's labels, or a peer port where the job has several
        tasks (TF_CONFIG and the like; an elastic role's first worker hosts its rendezvous there)."""
        plan: dict[tuple[str, int], dict[str, list[int]]] = {}
        several = len(placements) > 1 or spec.elastic_role is not None
        for p in placements:
            labels = spec.taskRoles[p.role].resourcePerInstance.ports or {}
            if not labels and several:
                labels = {PEER_PORT_LABEL: 1}
            if labels:
                taken = held.setdefault(p.node, set())
                got = self.backend.allocate_ports(p.node, sum(labels.values()), taken)
                taken.update(got)
                ports = iter(got)
                plan[(p.role, p.index)] = {label: [next(ports) for _ in range(n)] for label, n in labels.items()}
        return plan



def _started_runs(
    session: Session, starts: Sequence[StartJob], started: Sequence[int], pending: Sequence[PendingJob], now: float
) -> list[tuple[RunningJob, int]]:
    """The runs just started, as running work from about ``now`` (the next schedule step
    reads their exact start), with their attempts' numbers: for fair share."""
    waiting = {job.job_id: job for job in pending}
    rows = job_queries.jobs_by_ids(session, sorted(started))  # the session's own, just placed
    runs = []
    for start in starts:
        job, row = waiting.get(start.job_id), rows.get(start.job_id)
        if job is None or row is None:
            continue
        run = RunningJob(
            job_id=job.job_id, vc=job.vc, user=job.user, priority_rank=job.priority_rank,
            placements=start.placements, started_at=now, borrowed=start.borrowed,
        )
        runs.append((run, row.attempt))
    return runs
