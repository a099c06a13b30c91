"""The app context: what every request of the API and the portal works with (the store,
the backend, the controller to wake, the settings the server runs with, and the caches and
open connections of this server process), typed, in one place below both.

``yard up`` (``api/server.py``) makes one; the assembly (``api/app.py``) hangs it on the
app, and a route gets it with ``Depends(context)`` (a WebSocket route, ``context_of(websocket)``)."""

from __future__ import annotations

import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from fastapi import Request
from starlette.requests import HTTPConnection

from trainyard.backends.base import Backend
from trainyard.controller.loop import Controller
from trainyard.core.clock import Clock
from trainyard.core.retention import DEFAULT_RETENTION_TIERS, RetentionTier
from trainyard.core.sessions import SessionPolicy
from trainyard.core.settings import (
    DEFAULT_IDEMPOTENCY_KEY_HOURS,
    DEFAULT_JOB_DIR_RETENTION_SECONDS,
    DEFAULT_MONITOR_INTERVAL_SECONDS,
)
from trainyard.scheduler.snapshot import NodeState, SchedulerConfig
from trainyard.services import jobs as job_service
from trainyard.services import node_view, submission
from trainyard.services.auth import TokenCache
from trainyard.services.jobdirs import JobDirUsage
from trainyard.services.sign_in_limits import DEFAULT_FAILURES, DEFAULT_WINDOW_SECONDS, SignInLimiter
from trainyard.services.specs import StoredSpecs
from trainyard.services.submit_batches import SubmitBatches
from trainyard.services.task_access import Grants, PortUses
from trainyard.services.workdirs import WorkdirStore
from trainyard.store.db import Database
from trainyard.web.errorpage import ErrorPage
from trainyard.web.revocation import OpenConnections

NODE_CACHE_SECONDS = 2.0


@dataclass
class AppContext:
    db: Database
    backend: Backend
    clock: Clock
    controller: Controller | None = None
    specs: StoredSpecs = field(default_factory=StoredSpecs)  # the controller's, when there is one
    job_dir_retention_seconds: float = DEFAULT_JOB_DIR_RETENTION_SECONDS
    # How fresh a sample must be: live figures (GET /nodes, /top) and /metrics' "up"; and how
    # long a raw sample stands for in usage accounting.
    monitor_interval_seconds: float = DEFAULT_MONITOR_INTERVAL_SECONDS
    monitor_retention: tuple[RetentionTier, ...] = DEFAULT_RETENTION_TIERS  # what the history keeps
    # Fair share's half-life (the scheduler's; 0: off), for the usage report's recent figures.
    fair_share_half_life_seconds: float = SchedulerConfig().fair_share_half_life
    _nodes: tuple[float, list[NodeState]] = (-1e9, [])
    tokens: TokenCache = field(init=False)
    # Set once the server begins to shut down: streaming responses (log followers) end then.
    closing: threading.Event = field(default_factory=threading.Event)
    job_dirs: JobDirUsage = field(init=False)
    # Open WebSockets, tunnels and streamed answers, by the credential that opened them:
    # each ends when its credential no longer holds (web/revocation.py).
    connections: OpenConnections = field(init=False)
    sign_ins: SignInLimiter = field(init=False)  # the portal's sign-in tries, per name and address
    sign_in_failures: int = DEFAULT_FAILURES
    sign_in_window_seconds: float = DEFAULT_WINDOW_SECONDS
    # When each (job, user, role, index, port, how) last became a port-opened event (services/task_access.py).
    port_uses: PortUses = field(default_factory=PortUses)
    sessions: SessionPolicy = field(default_factory=SessionPolicy)  # interactive sessions' rules
    # The sizes of a submit the admin bounds: its rendered commands and env, waiting jobs per user.
    submit_limits: job_service.SubmitLimits = job_service.DEFAULT_SUBMIT_LIMITS
    idempotency_key_hours: float = DEFAULT_IDEMPOTENCY_KEY_HOURS  # how long a submit's Idempotency-Key is kept
    # Hosts a dataset's URL may name though they resolve to loopback, link-local or our own addresses.
    dataset_allowed_hosts: tuple[str, ...] = ()
    # Submits that arrive together made in one transaction (services/submit_batches.py).
    submit_batches: SubmitBatches | None = field(init=False)
    # Where uploaded working directories are kept, and how big one may be (services/workdirs.py);
    # `yard up` gives <home>/workdirs; a context built by hand (tests), a temporary folder.
    workdirs: WorkdirStore = field(default_factory=lambda: WorkdirStore(
        Path(tempfile.gettempdir()) / f"yard-wd-{uuid.uuid4().hex}"))  # made at its first upload, not here
    email_notices: bool = False  # whether job notices can be e-mailed (an SMTP server is set)
    # Who got through to which task's port, kept a few seconds (services/task_access.py).
    grants: Grants = field(init=False)
    # A session's JupyterLab token, and until when (monotonic) it is still starting, by job id
    # (api/routers/sessions.py).
    session_tokens: dict[int, str] = field(default_factory=dict)
    session_starting_until: dict[int, float] = field(default_factory=dict)
    # The proxy's connections to tasks (api/routers/proxy.py): made on first use, closed at shutdown.
    proxy_client: httpx.AsyncClient | None = None
    # How a refusal is shown to a browser: the portal's error page, once the assembly
    # (api/app.py) has installed the portal; JSON until then (web/errorpage.py).
    error_page: ErrorPage | None = None

    def __post_init__(self) -> None:
        self.tokens = TokenCache(self.db, clock=self.clock)
        self.connections = OpenConnections(self.db, self.clock)
        self.sign_ins = SignInLimiter(self.db, self.clock, failures=self.sign_in_failures,
                                      window=self.sign_in_window_seconds)
        self.job_dirs = JobDirUsage(self.backend, self.clock, self.job_dir_retention_seconds)
        self.grants = Grants(self.clock.monotonic)
        self.submit_batches = submission.submit_batches(self)

    def wake_controller(self) -> None:
        if self.controller is not None:
            self.controller.wake()

    def node_states(self) -> list[NodeState]:
        """The inventory for submit-time fit checks; it changes rarely, so it is cached briefly."""
        now = time.monotonic()
        if now - self._nodes[0] >= NODE_CACHE_SECONDS:
            with self.db.session() as session:
                self._nodes = (now, node_view.node_states(session, in_use=False))
        return self._nodes[1]


async def context(request: Request) -> AppContext:
    """The app's context, as a dependency. A coroutine, though it waits for nothing: FastAPI
    runs a plain function dependency on its thread pool, a hop there and back per request
    (issue 33: submits spent a tenth of their time handing work to threads). Code outside a
    dependency calls ``context_of``."""
    ctx: AppContext = request.app.state.ctx
    return ctx


def context_of(connection: HTTPConnection) -> AppContext:
    """The context of a request's or a WebSocket's app (for code outside a dependency)."""
    ctx: AppContext = connection.app.state.ctx
    return ctx
