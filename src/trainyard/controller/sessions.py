"""Interactive sessions' lifetimes and idleness (``services/dev_sessions.py`` starts them).

Every cycle, ``settle_lifetimes``: a session that has started gets its end (``expires_at``,
its start plus its lifetime), and one past its end is stopped as a user's stop would be,
saying why ("its lifetime of 24 h ended"); renewing moves the end (``yard dev renew``).

Every ``check_interval_seconds``, ``SessionWatch`` reads each running session's activity from
JupyterLab itself (``GET <base>/api/status``: the last activity of its API, kernels and
terminals, with ``no_track_activity`` so that looking is not activity), outside any
transaction. A session idle for ``idle_report_minutes`` gets one ``session-idle`` event per
idle spell; where the site sets ``idle_cull_minutes``, one idle that long is stopped.
A session that cannot be read is never culled: what went wrong is kept for its views.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

import httpx
from sqlalchemy.orm import Session

from trainyard.backends.base import Backend, TaskKey
from trainyard.controller.periodic import Periodic
from trainyard.controller.reconcile import current_attempt
from trainyard.core import transitions
from trainyard.core.clock import Clock
from trainyard.core.sessions import SESSION_PORT, SESSION_ROLE, SessionPolicy, jupyter_token, session_path
from trainyard.core.states import JobState
from trainyard.services.taskports import Owner, checked_transport, expected, owner_of
from trainyard.store.db import Database
from trainyard.store.events import record_event
from trainyard.store.queries import dev_sessions as session_queries
from trainyard.store.queries.nodes import node_addresses
from trainyard.store.rows import JobRow

log = logging.getLogger(__name__)

STOPPED_BY = "trainyard"
READ_TIMEOUT_SECONDS = 5.0


def _stop(session: Session, job: JobRow, because: str, now: datetime) -> None:
    for event in transitions.request_stop(job, current_attempt(job), STOPPED_BY, now, because=because):
        record_event(session, job.id, event)


def settle_lifetimes(session: Session, clock: Clock) -> list[int]:
    """Start the clock of sessions that have started; stop those past their end. Returns
    the sessions stopped."""
    now = clock.now()
    for row in session_queries.started_without_end(session):
        assert row.job.started_at is not None
        row.expires_at = row.job.started_at + timedelta(hours=row.hours)
    stopped = []
    for row in session_queries.past_their_end(session, now):
        renew = f" (renewed {row.renewals} time{'s' * (row.renewals != 1)})" if row.renewals else ""
        _stop(session, row.job, f"the session's lifetime ended{renew}; `yard dev renew {row.job_id}` "
                                f"extends a session before it ends", now)
        stopped.append(row.job_id)
    return stopped


@dataclass(frozen=True)
class Status:
    last_activity: datetime
    kernels: int | None
    connections: int | None


def parse_status(data: object) -> Status:
    """JupyterLab's ``/api/status`` answer; ValueError if it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("last_activity"), str):
        raise ValueError(f"not a Jupyter server status: {str(data)[:200]}")
    last = datetime.fromisoformat(data["last_activity"].replace("Z", "+00:00"))
    counts = [data.get(key) for key in ("kernels", "connections")]
    kernels, connections = (c if isinstance(c, int) else None for c in counts)
    return Status(last, kernels, connections)


class SessionWatch(Periodic):
    thread_name = "trainyard-session-watch"

    def __init__(self, db: Database, clock: Clock, policy: SessionPolicy, backend: Backend | None = None) -> None:
        super().__init__(clock, policy.check_interval_seconds)
        self.db = db
        self.policy = policy
        self.backend = backend  # checks that a session's own JupyterLab took the connection (PortOwners)

    def run_logged(self) -> None:
        try:
            self.check()
        except Exception:  # noqa: BLE001 - retried at the next interval
            log.exception("reading the sessions' activity failed")

    def _targets(self) -> list[tuple[int, str, str, Owner | None]]:
        """(job id, status URL, token, the task to check the connection against) of each running session."""
        with self.db.session() as session:
            addresses = node_addresses(session)
            targets = []
            for job, task in session_queries.running_session_tasks(session, SESSION_ROLE, 0):
                ports, token = task.ports.get(SESSION_PORT), jupyter_token(job.spec)
                if not ports or token is None:
                    continue
                host = addresses.get(task.node) or task.node
                host = f"[{host}]" if ":" in host else host
                url = f"http://{host}:{ports[0]}{session_path(job.id)}api/status?no_track_activity=1"
                key = TaskKey(job.id, task.attempt.number, task.role, task.index, task.run)
                owner = None if self.backend is None else owner_of(self.backend, key, task.node)
                targets.append((job.id, url, token, owner))
            return targets

    def check(self) -> None:
        targets = self._targets()
        if not targets:
            return
        read: dict[int, Status | str] = {}
        # The token goes only on a connection the session's own JupyterLab took (taskports).
        with httpx.Client(timeout=READ_TIMEOUT_SECONDS, trust_env=False,
                          transport=checked_transport(trust_env=False)) as client:
            for job_id, url, token, owner in targets:
                checking = expected.set(owner)
                try:
                    answer = client.get(url, headers={"Authorization": f"token {token}"})
                    answer.raise_for_status()
                    read[job_id] = parse_status(answer.json())
                except (httpx.HTTPError, ValueError) as exc:
                    read[job_id] = f"{type(exc).__name__}: {exc}"[:500]
                finally:
                    expected.reset(checking)
        self.record(read)

    def record(self, read: dict[int, Status | str]) -> None:
        now = self.clock.now()
        report = timedelta(minutes=self.policy.idle_report_minutes)
        cull = None if self.policy.idle_cull_minutes is None else timedelta(minutes=self.policy.idle_cull_minutes)
        with self.db.session() as session:
            for job_id, status in read.items():
                row = session_queries.dev_session(session, job_id)
                if row is None or row.job.state != JobState.RUNNING:
                    continue
                row.checked_at = now
                if isinstance(status, str):
                    row.check_error = status
                    continue
                row.check_error = ""
                row.last_activity, row.kernels, row.connections = (
                    status.last_activity, status.kernels, status.connections)
                idle = now - status.last_activity
                if row.idle_reported_at is not None and status.last_activity > row.idle_reported_at:
                    row.idle_reported_at = None  # active again: a new idle spell will be reported
                if cull is not None and idle >= cull:
                    _stop(session, row.job, f"idle for {_minutes(idle)} (this site stops sessions idle for "
                                            f"{_minutes(cull)})", now)
                elif idle >= report and row.idle_reported_at is None:
                    row.idle_reported_at = now
                    record_event(session, job_id, transitions.Event(
                        transitions.EventKind.SESSION_IDLE,
                        f"idle: no activity for {_minutes(idle)} (last at {status.last_activity:%Y-%m-%d %H:%M:%S} UTC)"
                        + (f"; it is stopped after {_minutes(cull)} idle" if cull is not None else ""), now))


def _minutes(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    if seconds < 60:
        return f"{seconds} s"
    minutes = seconds // 60
    return f"{minutes // 60} h {minutes % 60} min" if minutes >= 60 else f"{minutes} min"
