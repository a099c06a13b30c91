"""Who may reach into a running task, and which task it is: the one rule that the port
proxy, the TCP tunnel (``api/routers/proxy``), exec and shell (``api/routers/taskexec``)
and the JupyterLab sessions' way in (``api/routers/sessions``) share.

A caller is identified by a token or by the portal's session cookie (``web/callers``).
Only the job's owner and admins with a token get through; anyone else is told 404, as
for a job that does not exist. An admin's browser session is refused: the task's pages,
or its terminal, would run with the admin's rights (docs/security.md). A session's way in
lets admins in only where the site allows it (``session_admin_access``).

Who may reach what is asked of the store once per credential, job, task and port every
``GRANT_SECONDS`` (3 s), not on every request (:class:`Grants`; ``api/routers/proxy`` says
why).
"""

from __future__ import annotations

import enum
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from trainyard.backends.base import Backend, TaskKey
from trainyard.core.clock import Clock
from trainyard.core.sessions import SESSION_PORT, SESSION_ROLE, jupyter_token
from trainyard.core.states import FINAL_JOB_STATES, JobState
from trainyard.core.transitions import Event, EventKind
from trainyard.services.taskports import Owner, owner_of
from trainyard.store.db import Database
from trainyard.store.events import record_event
from trainyard.store.queries import dev_sessions as session_queries
from trainyard.store.queries import jobs as job_queries
from trainyard.store.queries.nodes import node_addresses
from trainyard.store.rows import UserRow

# A session's JupyterLab may take this long to answer after its task starts (a first
# start on a loaded node builds its workspace): until then a refused connection is "not
# yet" (503, the page reloads every STARTING_RETRY_SECONDS), after it the proxy's 502.
STARTING_SECONDS = 300.0
STARTING_RETRY_SECONDS = 2
QUEUED_RETRY_SECONDS = 5  # a session waiting in the queue: the page reloads this often


class Refused(Exception):
    """The request is refused with ``status``; ``message`` says why, for the caller;
    ``retry_after`` (seconds), when what was asked for is on its way (a task starting): a
    program gets it as ``Retry-After``, a browser a page that reloads itself after it."""

    def __init__(self, status: int, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.retry_after = retry_after


@dataclass(frozen=True)
class Caller:
    user: UserRow
    by_cookie: bool  # a browser's session, rather than a token
    credential: str = ""  # what it came with, as `web.callers.credential_key` names it (web/revocation.py)


@dataclass(frozen=True)
class RunningTask:
    """A running task of a job the caller may reach into."""

    key: TaskKey
    node: str
    ports: dict[str, list[int]]


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    # The task whose own processes must have taken a connection before anything is sent on
    # it (``services/taskports``); None where the backend cannot check (docs/security.md).
    owner: Owner | None = None


class Reach(enum.Enum):
    """What the rule says of a caller and a job's owner."""

    YES = "yes"
    NO = "no"  # answered as a job that does not exist
    NOT_BY_BROWSER = "not by browser"  # an admin's browser session, at another user's job


def reach(caller: Caller, owner_id: int, *, admins: bool = True) -> Reach:
    """The one rule: the job's owner, or an admin with a token (``admins``: where admins
    may at all); an admin's browser session is told apart so that it can be told why."""
    if owner_id == caller.user.id:
        return Reach.YES
    if not caller.user.is_admin or not admins:
        return Reach.NO
    return Reach.NOT_BY_BROWSER if caller.by_cookie else Reach.YES


def running_task(db: Database, caller: Caller, job_id: int, role: str, index: int, *,
                 what: str, instead: str) -> RunningTask:
    """Task ``role/index`` of job ``job_id`` if it runs and ``caller`` may reach into it;
    Refused saying why not. ``what`` names what is reached ("its ports"), ``instead`` the
    command an admin uses rather than the browser."""
    with db.session() as session:
        job = job_queries.job_by_id(session, job_id)
        allowed = reach(caller, job.user_id) if job is not None else Reach.NO
        if job is None or allowed == Reach.NO:
            raise Refused(404, f"no job {job_id}")
        if allowed == Reach.NOT_BY_BROWSER:
            # An admin's browser would run the job's pages with the admin's session.
            raise Refused(403, f"job {job_id} is another user's: reach {what} with `{instead}`, "
                               "not through the browser")
        if job.state != JobState.RUNNING:
            raise Refused(409, f"job {job_id} is {job.state}, not RUNNING: {what} are reachable only while it runs")
        task = job_queries.running_task(session, job_id, role, index)
        if task is None:
            raise Refused(404, f"job {job_id} has no running task {role}/{index}")
        key = TaskKey(job_id, task.attempt.number, task.role, task.index, task.run)
        return RunningTask(key, task.node, {name: list(ports) for name, ports in task.ports.items()})


def port_target(db: Database, backend: Backend, caller: Caller, job_id: int, role: str, index: int,
                port: int) -> Target:
    """Where task ``role/index``'s allocated ``port`` is, if ``caller`` may reach it; Refused
    saying why not. Only a port the task was allocated: on a shared node any other port may
    be another user's service on the same host network."""
    task = running_task(db, caller, job_id, role, index, what="its ports", instead=f"yard port-forward {job_id}")
    allocated = sorted(p for ports in task.ports.values() for p in ports)
    if port not in allocated:
        which = ", ".join(map(str, allocated)) or "none (declare them in resourcePerInstance.ports)"
        raise Refused(404, f"port {port} is not one of task {role}/{index}'s ports: {which}")
    with db.session() as session:
        address = node_addresses(session).get(task.node) or task.node
    return Target(address, port, owner_of(backend, task.key, task.node))


def session_target(db: Database, backend: Backend, clock: Clock, caller: Caller, job_id: int, *,
                   admin_access: bool) -> tuple[Target, str, float]:
    """Where session ``job_id``'s JupyterLab listens, its token and how many seconds of its
    start are left (``STARTING_SECONDS`` from its task's start), if ``caller`` may open it:
    its owner, or an admin with a token where ``admin_access``; anyone else is told 404."""
    with db.session() as session:
        row = session_queries.dev_session(session, job_id)
        job = row.job if row is not None else None
        if job is None or reach(caller, job.user_id, admins=admin_access) != Reach.YES:
            raise Refused(404, f"no session {job_id}")
        if job.state != JobState.RUNNING:
            waiting = f" ({job.pending_short or job.state_message})" if job.state == JobState.WAITING else ""
            if job.state in FINAL_JOB_STATES or job.state == JobState.STOPPING:
                raise Refused(409, f"session {job_id} is {job.state}, not RUNNING: start a new one")
            if job.held_by:
                raise Refused(409, f"session {job_id} is {job.state}, held by {job.held_by}: "
                                   f"`yard resume {job_id}` lets it run again")
            raise Refused(503, f"session {job_id} is {job.state}{waiting}, not RUNNING: it opens once it runs",
                          retry_after=QUEUED_RETRY_SECONDS)
        task = job_queries.running_task(session, job_id, SESSION_ROLE, 0)
        ports = task.ports.get(SESSION_PORT) if task is not None else None
        token = jupyter_token(job.spec)
        if task is None or not ports or token is None:
            raise Refused(503, f"session {job_id} is starting: it opens in a moment",
                          retry_after=STARTING_RETRY_SECONDS)
        now = clock.now()
        left = STARTING_SECONDS - (now - (task.started_at or now)).total_seconds()
        key = TaskKey(job_id, task.attempt.number, task.role, task.index, task.run)
        owner = owner_of(backend, key, task.node)  # the token goes only to the task's own JupyterLab
        return Target(node_addresses(session).get(task.node) or task.node, ports[0], owner), token, left


GRANT_SECONDS = 3.0
MAX_GRANTS = 10_000
GrantKey = tuple[str, int, str, int, int]  # (credential's hash, job, role, index, port)


class Grants:
    """The checks that let a request through, kept GRANT_SECONDS per credential, job, task
    and port. Only a check that let a request through is kept; a refusal is asked again. So
    a sign-out, a revoked token or a job that stops takes up to that long to close the way
    to a caller that was already getting through. Used from the event loop only: no lock."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._granted: dict[GrantKey, tuple[float, Caller, Target]] = {}

    def get(self, key: GrantKey) -> tuple[Caller, Target] | None:
        found = self._granted.get(key)
        if found is None:
            return None
        if self._clock() - found[0] >= GRANT_SECONDS:
            del self._granted[key]
            return None
        return found[1], found[2]

    def keep(self, key: GrantKey, caller: Caller, target: Target) -> None:
        now = self._clock()
        if len(self._granted) >= MAX_GRANTS:
            stale = [k for k, (at, _, _) in self._granted.items() if now - at >= GRANT_SECONDS]
            for old in stale or list(self._granted):
                del self._granted[old]
        self._granted[key] = (now, caller, target)


# How often one user's use of one port becomes an event on the job: every forward is
# worth a line in its history, a browser's hundred requests a page are not.
EVENT_EVERY_SECONDS = 600.0
MAX_REMEMBERED = 10_000  # uses remembered for the rate limit; older ones are forgotten past it
UseKey = tuple[int, int, str, int, int, str]  # (job, user, role, index, port, how)


class PortUses:
    """When each (job, user, role, index, port, how) last became a port-opened event: a
    user's first use, then at most one per EVENT_EVERY_SECONDS. Asked from the event loop and
    the thread pool alike: locked."""

    def __init__(self) -> None:
        self._uses: dict[UseKey, float] = {}
        self._lock = threading.Lock()

    def due(self, caller: Caller, job_id: int, role: str, index: int, port: int, how: str) -> bool:
        """Whether this use is to be an event on the job (noted as made when this answers yes)."""
        key = (job_id, caller.user.id, role, index, port, how)
        now = time.monotonic()
        with self._lock:
            if now - self._uses.get(key, -1e18) < EVENT_EVERY_SECONDS:
                return False
            if len(self._uses) >= MAX_REMEMBERED:
                for old in [k for k, at in self._uses.items() if now - at >= EVENT_EVERY_SECONDS] or list(self._uses):
                    del self._uses[old]
            self._uses[key] = now
        return True


def record_port_use(db: Database, clock: Clock, caller: Caller, job_id: int, role: str, index: int, port: int,
                    how: str) -> None:
    """The job's event: ``caller`` opened ``how`` (the proxy, a port-forward, the session) to a task's port."""
    message = f"{caller.user.name} opened {how} to task {role}/{index} port {port}"
    with db.session() as session:
        record_event(session, job_id, Event(EventKind.PORT_OPENED, message, clock.now()))


def record_exec(db: Database, clock: Clock, job_id: int, message: str) -> None:
    """The job's event: a command run in one of its tasks (``describe``-d by the exec route)."""
    with db.session() as session:
        record_event(session, job_id, Event(EventKind.EXEC, message, clock.now()))
