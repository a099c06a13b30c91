"""The controller test world: a migrated store, the real local backend (simulated GPUs, real
processes), a controller on both and the users who submit; built by the ``make_world``
fixture (tests/conftest.py), which stops the controller and kills the tasks it started at the
end.

What differs between tests is a parameter of ``make_world``: the GPUs and the node's CPU and
memory, the clock (the system's, or a ``FakeClock`` the test moves), the users and admins,
the controller's options (``session_policy``, ``job_dir_max_bytes``, ...), the backend's
(``containers``). What each test does with it is a method: submit a job file as a user, run
controller cycles until a job reaches some states (a deadline through ``tests/deadlines.py``'s
``scaled()``, and a failure that says where the job stands), read a job, its tasks, attempts
and events back, stop a job. A test file with something special adds it as a subclass
(``make_world(kind=...)``), not as a copy.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from deadlines import scaled
from e2e.server import kill_tasks_under
from sqlalchemy import select

from trainyard.backends.local.backend import LocalBackend
from trainyard.backends.local.gpus import simulated_gpus
from trainyard.controller.loop import Controller
from trainyard.core.clock import Clock, SystemClock
from trainyard.services import auth
from trainyard.services import jobs as job_service
from trainyard.spec.loading import parse_job
from trainyard.store.db import Database
from trainyard.store.events import job_events
from trainyard.store.rows import AttemptRow, JobRow, TaskRow, UserRow

ENDED = ("SUCCEEDED", "FAILED", "STOPPED")


@dataclass
class World:
    """A store, a backend and a controller on them (the controller may be replaced: a restart);
    ``users`` by name, in the order they were made (``world.alice`` is ``world.users["alice"]``)."""

    db: Database
    backend: LocalBackend
    clock: Clock
    controller: Controller
    users: dict[str, UserRow] = field(default_factory=dict)
    tasks_root: Path | None = None  # the folder the backend's tasks run under: killed at the end

    def __getattr__(self, name: str) -> UserRow:
        users = self.__dict__.get("users") or {}
        if name in users:
            return users[name]
        raise AttributeError(name)

    @property
    def user(self) -> UserRow:
        """The first user who is not an admin: the one who submits unless told otherwise."""
        return next(u for u in self.users.values() if not u.is_admin)

    def submit(self, text: str, user: UserRow | None = None) -> int:
        """Submit a job file as ``user`` (the first plain user); its id."""
        with self.db.session() as s:
            return job_service.submit_job(s, s.merge(user or self.user), parse_job(text), clock=self.clock).id

    def stop(self, job_id: int, user: UserRow | None = None) -> None:
        """``user`` (the first plain user) asks to stop the job, as ``yard stop`` does."""
        with self.db.session() as s:
            job_service.request_stop(s, s.merge(user or self.user), job_id, clock=self.clock)

    def cycle(self) -> None:
        """One controller cycle, woken as a submit or a stop would wake it."""
        self.controller.wake()
        self.controller.run_once()

    def drive(self, job_id: int, states: Sequence[str] | None = ENDED, *,
              until: Callable[[JobRow], bool] | None = None, timeout: float = 30.0, advance: float = 0.0,
              interval: float = 0.02, what: str = "") -> JobRow:
        """Run cycles until the job is in one of ``states`` (any state: None) and ``until(job)``
        holds; the job as ``job()`` reads it. ``advance``: seconds the (fake) clock moves after each cycle that
        did not get there, so that what the controller waits for by its clock comes. The
        deadline is ``timeout`` seconds, ``scaled()``; a miss says where the job stands (and
        ``what`` it waited for)."""
        deadline = time.monotonic() + scaled(timeout)
        while True:
            self.cycle()
            job = self.job(job_id)
            if (states is None or job.state in states) and (until is None or until(job)):
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} did not reach {what or states} in {scaled(timeout):g} s\n"
                                     f"{self.explain(job_id)}")
            if advance:
                self.clock.advance(advance)  # type: ignore[attr-defined]
            time.sleep(interval)

    def job(self, job_id: int) -> JobRow:
        """The job's row with its attempts and their tasks, read in a session now closed."""
        with self.db.session() as s:
            job = s.get(JobRow, job_id)
            assert job is not None, f"no job {job_id}"
            for attempt in job.attempts:
                _ = attempt.tasks
            return job

    def tasks(self, job_id: int) -> list[TaskRow]:
        """Every task row of the job (of every attempt), by role and index."""
        with self.db.session() as s:
            return list(s.scalars(select(TaskRow).where(TaskRow.job_id == job_id)
                                  .order_by(TaskRow.role, TaskRow.index)))

    def attempts(self, job_id: int) -> list[AttemptRow]:
        with self.db.session() as s:
            rows = list(s.scalars(select(AttemptRow).where(AttemptRow.job_id == job_id)
                                  .order_by(AttemptRow.number)))
            s.expunge_all()
            return rows

    def events(self, job_id: int) -> list[tuple[str, str]]:
        """The job's events, oldest first, as (kind, message)."""
        with self.db.session() as s:
            return [(e.kind, e.message) for e in job_events(s, job_id)]

    def explain(self, job_id: int) -> str:
        """What the store and the backend's task folders say of a job: for a failure's message."""
        lines = []
        with self.db.session() as s:
            job = s.get(JobRow, job_id)
            if job is None:
                return f"no job {job_id}"
            lines.append(f"job: {job.state} attempt {job.attempt} {job.state_message!r}")
            for task in s.scalars(select(TaskRow).where(TaskRow.job_id == job_id).order_by(TaskRow.id)):
                lines.append(f"task {task.role}/{task.index} (attempt row {task.attempt_id}): {task.state} "
                             f"stop_sent={task.stop_sent} exit={task.exit_code} {task.message!r}")
            lines += [f"event {e.kind}: {e.message}" for e in job_events(s, job_id)]
        for task_dir in sorted((self.backend.state_dir / "tasks" / str(job_id)).glob("*/*")):
            for name in ("pid.json", "stop.json", "status.json", "exit.json", "supervisor.log", "output.log"):
                if (task_dir / name).is_file():
                    lines.append(f"{task_dir.name}/{name}: {(task_dir / name).read_text(errors='replace')[-2000:]}")
        return "\n".join(lines)

    def close(self) -> None:
        """Stop the controller (its periodic threads are waited for, so that none still reads
        the store once the test's database goes) and kill the tasks it started."""
        self.controller.stop()
        if self.tasks_root is not None:
            kill_tasks_under(self.tasks_root)


W = TypeVar("W", bound=World)


def build_world(db: Database, root: Path, *, kind: type[W] = World, gpus: int = 4,  # type: ignore[assignment]
                cpu_milli: int = 8000, memory_mb: int = 16384, clock: Clock | None = None,
                users: Sequence[str] = ("alice",), admins: Sequence[str] = (), inventory: bool = True,
                monitoring: bool = True, backend_options: dict[str, Any] | None = None,
                **controller_options: Any) -> W:
    """A world on ``db`` whose backend keeps its state under ``root / "local"``: ``gpus``
    simulated GPUs on one node, ``users`` made in that order (those also in ``admins`` as
    admins; the other admins after them). ``inventory``: a first cycle has recorded the node
    (without it, nothing has run yet). ``monitoring=False``: no sampling rounds (a test that
    writes the samples itself)."""
    clock = clock or SystemClock()
    backend = LocalBackend(root / "local", gpus=simulated_gpus(gpus), cpu_milli=cpu_milli, memory_mb=memory_mb,
                           **(backend_options or {}))
    controller = Controller(db, backend, clock, **controller_options)
    if not monitoring:
        controller.monitoring = None
    made = {}
    with db.session() as s:
        for name in [*users, *(a for a in admins if a not in users)]:
            made[name] = auth.create_user(s, name, is_admin=name in admins, clock=clock)
    world = kind(db, backend, clock, controller, made, root)
    if inventory:
        controller.run_once()
    return world
