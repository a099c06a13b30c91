"""Request dependencies: the app's services container and who is calling."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from fastapi import Depends, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from trainyard.api.revocation import OpenConnections
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
from trainyard.scheduler.snapshot import NodeState
from trainyard.services import jobs as job_service
from trainyard.services import node_view
from trainyard.services.auth import TokenCache
from trainyard.services.jobdirs import JobDirUsage
from trainyard.services.sign_in_limits import DEFAULT_FAILURES, DEFAULT_WINDOW_SECONDS, SignInLimiter
from trainyard.services.specs import StoredSpecs
from trainyard.store.db import Database
from trainyard.store.rows import UserRow

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
    _nodes: tuple[float, list[NodeState]] = (-1e9, [])
    tokens: TokenCache = field(init=False)
    # Set once the server begins to shut down: streaming responses (log followers) end then.
    closing: threading.Event = field(default_factory=threading.Event)
    job_dirs: JobDirUsage = field(init=False)
    # Open WebSockets, tunnels and streamed answers, by the credential that opened them:
    # each ends when its credential no longer holds (api/revocation.py).
    connections: OpenConnections = field(init=False)
    sign_ins: SignInLimiter = field(init=False)  # the portal's sign-in tries, per name and address
    sign_in_failures: int = DEFAULT_FAILURES
    sign_in_window_seconds: float = DEFAULT_WINDOW_SECONDS
    # When each (job, user, role, index, port, how) last became a port-opened event (api/routers/proxy.py).
    port_uses: dict[tuple[int, int, str, int, int, str], float] = field(default_factory=dict)
    sessions: SessionPolicy = field(default_factory=SessionPolicy)  # interactive sessions' rules
    # The sizes of a submit the admin bounds: its rendered commands and env, waiting jobs per user.
    submit_limits: job_service.SubmitLimits = job_service.DEFAULT_SUBMIT_LIMITS
    idempotency_key_hours: float = DEFAULT_IDEMPOTENCY_KEY_HOURS  # how long a submit's Idempotency-Key is kept

    def __post_init__(self) -> None:
        self.tokens = TokenCache(self.db, clock=self.clock)
        self.connections = OpenConnections(self.db, self.clock)
        self.sign_ins = SignInLimiter(self.db, self.clock, failures=self.sign_in_failures,
                                      window=self.sign_in_window_seconds)
        self.job_dirs = JobDirUsage(self.backend, self.clock, self.job_dir_retention_seconds)

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


def context(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.ctx
    return ctx


# Declares the bearer scheme in the OpenAPI document (the "Authorize" button of /docs);
# the errors stay ours, so it does not refuse requests by itself.
bearer = HTTPBearer(
    auto_error=False,
    description="A Trainyard token: `yard token create`, or the admin's in $TRAINYARD_HOME/client.json",
)


async def current_user(
    credentials: HTTPAuthorizationCredentials | None = Depends(bearer), ctx: AppContext = Depends(context)
) -> UserRow:
    token = credentials.credentials if credentials is not None else ""
    if not token.strip():
        raise HTTPException(
            401,
            "missing bearer token: send 'Authorization: Bearer <token>' "
            "(the CLI reads TRAINYARD_TOKEN or $TRAINYARD_HOME/client.json)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    user = await run_in_threadpool(ctx.tokens.user_for_token, token.strip())
    if user is None:
        raise HTTPException(401, "invalid or revoked token", headers={"WWW-Authenticate": "Bearer"})
    if user.disabled:
        raise HTTPException(401, f"user {user.name} is disabled; an admin can enable it again "
                                 f"(`yard user enable {user.name}`)", headers={"WWW-Authenticate": "Bearer"})
    return user


async def admin_user(user: UserRow = Depends(current_user)) -> UserRow:
    if not user.is_admin:
        raise HTTPException(403, "this needs an admin")
    return user
