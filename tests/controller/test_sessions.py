"""Interactive sessions in the controller, on a real store and the real local backend (a real
JupyterLab runs in each session's task); the controller's time is a fake clock: a session's
lifetime starts when it runs, renewing moves its end, it is stopped once past it; the idle
report comes once per idle spell and the cull only where the site sets one."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta

import pytest
from e2e.server import wait_until
from worlds import World

from trainyard.controller.sessions import SessionWatch, Status
from trainyard.core.clock import FakeClock
from trainyard.core.sessions import SessionPolicy
from trainyard.schemas.sessions import SessionRequest
from trainyard.services import dev_sessions
from trainyard.services import jobs as job_service
from trainyard.services.errors import Conflict, Invalid, NotFound
from trainyard.spec.loading import parse_job
from trainyard.store.rows import DevSessionRow, JobRow

POLICY = SessionPolicy(python=sys.executable, hours=2, max_hours=8, idle_report_minutes=30, idle_cull_minutes=90,
                       check_interval_seconds=3600)


class SessionWorld(World):
    """The world with a session policy, on a fake clock: alice starts sessions."""

    def start(self, **request: object) -> int:
        with self.db.session() as s:
            return dev_sessions.start_session(s, self.alice, SessionRequest.model_validate(request), policy=POLICY,
                                              clock=self.clock).job_id

    def row(self, job_id: int) -> DevSessionRow:
        with self.db.session() as s:
            row = s.get(DevSessionRow, job_id)
            assert row is not None
            _ = row.job.state
            return row

    def cycle(self) -> None:
        super().cycle()
        self.controller.session_watch.join()

    def running(self, job_id: int) -> None:
        """Cycles until the job runs; the controller's time passes while it waits, as it
        would: what it waits for by its clock (a grace period before a stop is enforced) comes."""
        try:  # a loaded CI machine starts a task in seconds, not tens of seconds: 60 s is ample
            self.drive(job_id, ("RUNNING",), timeout=60, advance=1.0)
        except AssertionError as exc:  # say where every job stands, for a failure that cannot be rerun
            others = [self.explain(j) for j in self.job_ids() if j != job_id]
            raise AssertionError(f"{exc}\nevery other job: {others}") from None

    def job_ids(self) -> list[int]:
        with self.db.session() as s:
            return [j.id for j in s.query(JobRow).order_by(JobRow.id)]


@pytest.fixture
def world(make_world) -> SessionWorld:
    return make_world(kind=SessionWorld, gpus=2, clock=FakeClock(datetime.now(UTC)), users=("alice", "bob"),
                      session_policy=POLICY)


@pytest.mark.postgres
def test_a_session_lives_its_lifetime_from_its_start_renewals_move_its_end_then_it_is_stopped(
    world: SessionWorld,
) -> None:
    session = world.start(gpu=0.5)
    assert world.row(session).expires_at is None  # waiting: its lifetime has not begun
    world.running(session)
    world.cycle()  # the cycle after its start gives it its end
    started = world.job(session).started_at
    assert started is not None and world.row(session).expires_at == started + timedelta(hours=2)

    world.clock.advance(3600)
    with world.db.session() as s:
        dev_sessions.renew_session(s, world.alice, session, 3, policy=POLICY, clock=world.clock)
    assert world.row(session).expires_at == world.clock.now() + timedelta(hours=3)
    world.clock.advance(2 * 3600)  # past the first end, within the renewed one
    world.cycle()
    assert world.job(session).state == "RUNNING"

    world.clock.advance(3600)
    world.cycle()
    job = world.job(session)
    assert job.state in ("STOPPING", "STOPPED")
    assert "the session's lifetime ended (renewed 1 time)" in job.state_message
    kinds = [kind for kind, _ in world.events(session)]
    assert kinds.index("session-renewed") < kinds.index("stop-requested")
    wait_until(lambda: world.cycle() or world.job(session).state == "STOPPED", what="the session to stop")
    with world.db.session() as s, pytest.raises(Conflict, match="has already ended"):
        dev_sessions.renew_session(s, world.alice, session, None, policy=POLICY, clock=world.clock)


def test_renewals_and_views_are_the_owners_and_bounded_by_the_site(world: SessionWorld) -> None:
    session = world.start(name="mine", hours=1)
    with world.db.session() as s:
        with pytest.raises(NotFound, match=f"no job {session}"):
            dev_sessions.session_of(s, world.bob, session)
        with pytest.raises(Invalid, match="hours: at most 8 h at a time"):
            dev_sessions.renew_session(s, world.alice, session, 9, policy=POLICY, clock=world.clock)
        # Not started yet: a renewal sets the lifetime it will have from its start.
        dev_sessions.renew_session(s, world.alice, session, 4, policy=POLICY, clock=world.clock)
        assert [r.job_id for r in dev_sessions.list_sessions(s, world.alice)] == [session]
        assert dev_sessions.list_sessions(s, world.bob) == []
    assert world.row(session).hours == 4


def test_bad_requests_are_refused_at_the_requests_own_fields(world: SessionWorld) -> None:
    cases = [
        ({"gpu": 1.5}, "gpu"),
        ({"image": "no such/image:1"}, "image"),
        ({"priority": "urgent"}, "priority"),
        ({"name": "no spaces"}, "name"),
        ({"hours": 100}, None),
    ]
    for request, field in cases:
        with world.db.session() as s, pytest.raises(Invalid) as refused:
            dev_sessions.start_session(s, world.alice, SessionRequest.model_validate(request), policy=POLICY,
                                       clock=world.clock)
        if field is not None:
            assert [d["path"] for d in refused.value.details] == [field], (request, refused.value.message)
    with world.db.session() as s, pytest.raises(Invalid) as no_python:
        dev_sessions.start_session(s, world.alice, SessionRequest(), policy=SessionPolicy(), clock=world.clock)
    assert "TRAINYARD_SESSION_PYTHON" in no_python.value.message


def test_jupyterlabs_own_activity_is_read_and_an_idle_session_reported_once_then_culled(world: SessionWorld) -> None:
    session = world.start()
    world.running(session)
    watch = SessionWatch(world.db, world.clock, POLICY)
    # The real JupyterLab answers, its last activity about now.
    def read() -> DevSessionRow | None:
        world.cycle()
        watch.check()
        row = world.row(session)
        return row if row.last_activity is not None else None
    row = wait_until(read, timeout=60, what="JupyterLab's status")
    assert row.check_error == "" and row.kernels == 0
    assert abs((row.last_activity - world.clock.now()).total_seconds()) < 120

    last = world.clock.now()
    world.clock.advance(31 * 60)
    watch.record({session: Status(last, 0, 0)})
    watch.record({session: Status(last, 0, 0)})
    idle = [message for kind, message in world.events(session) if kind == "session-idle"]
    assert len(idle) == 1 and idle[0].startswith("idle: no activity for 31 min")
    assert "stopped after 1 h 30 min" in idle[0]
    # Active again, then idle again: a new spell, a new report.
    world.clock.advance(60)
    watch.record({session: Status(world.clock.now(), 1, 1)})
    world.clock.advance(40 * 60)
    watch.record({session: Status(world.clock.now() - timedelta(minutes=40), 1, 0)})
    assert [kind for kind, _ in world.events(session)].count("session-idle") == 2
    # Unreadable: kept as the reason, never culled for it.
    world.clock.advance(3 * 3600)
    watch.record({session: "ConnectError: refused"})
    assert world.row(session).check_error == "ConnectError: refused" and world.job(session).state == "RUNNING"

    watch.record({session: Status(world.clock.now() - timedelta(minutes=91), 0, 0)})
    job = world.job(session)
    assert job.state == "STOPPING"
    assert "idle for 1 h 31 min (this site stops sessions idle for 1 h 30 min)" in job.state_message


def test_an_opportunistic_session_is_reclaimed_for_a_guaranteed_job_and_comes_back_after(world: SessionWorld) -> None:
    session = world.start(gpu=2, priority="oppo")
    world.running(session)
    with world.db.session() as s:
        urgent = job_service.submit_job(s, world.bob, parse_job(
            "name: urgent\nstopGracePeriodSeconds: 1\ntaskRoles:\n  m:\n    resourcePerInstance: {gpu: 2}\n"
            "    commands: ['sleep 600']\n"), clock=world.clock).id
    world.running(urgent)
    job = world.job(session)
    assert job.state == "WAITING" and job.retries_used == 0, world.explain(session)
    assert "preempted" in [kind for kind, _ in world.events(session)]
    with world.db.session() as s:
        job_service.request_stop(s, world.bob, urgent, clock=world.clock)
    world.running(session)  # its next attempt: JupyterLab again, its notebooks in the job's directory
    assert world.job(session).attempt == 1


def test_a_session_is_never_cloned(world: SessionWorld) -> None:
    session = world.start()
    with world.db.session() as s, pytest.raises(Conflict, match="is a JupyterLab session: start another"):
        job_service.clone_job(s, world.alice, session, job_service.CloneChanges(), specs=world.controller.specs,
                              clock=world.clock)
