"""Group commit of submits (``services/submit_batches.py``): submits that queue while a batch
is being made share the next one, one transaction; each is answered after its commit, a
refused one alone, and a batch that fails is made again one submit at a time."""

from __future__ import annotations

import queue
import threading
from typing import Any

import pytest
from deadlines import scaled

from trainyard.services.errors import TooMany
from trainyard.services.idempotency import Answer
from trainyard.services.submit_batches import SubmitBatches
from trainyard.store.db import Database
from trainyard.store.rows import UserRow


class World:
    """A server as the batches see it, whose ``make_many`` blocks the first submit until
    told, so that the others queue behind it and share a batch, and refuses the submit
    named "refused" alone (as ``submission``'s refuses one its checks refuse)."""

    def __init__(self, db: Database, *, fail_batch: bool = False) -> None:
        self.db = db
        self.wakes = 0
        self.sessions: dict[str, object] = {}
        self.alone: list[str] = []
        self.first_in = threading.Event()
        self.go = threading.Event()
        self.fail_batch = fail_batch

    def wake_controller(self) -> None:
        self.wakes += 1

    def make_many(self, session: Any, _server: Any, items: list[tuple[UserRow, Any, list[str]]]) -> list[Any]:
        outcomes: list[Answer | Exception] = []
        for _user, spec, _warnings in items:
            try:
                outcomes.append(self.make_in(session, spec))
            except TooMany as refused:
                outcomes.append(refused)
        return outcomes

    def make_in(self, session: Any, spec: Any) -> Answer:
        if spec == "first":
            self.first_in.set()
            assert self.go.wait(scaled(30))
        self.sessions[spec] = session
        if spec == "refused":
            raise TooMany("too many waiting jobs")
        if self.fail_batch and spec != "first":
            raise RuntimeError("the store went away")
        return Answer(201, f'"{spec}"', len(self.sessions))

    def make_alone(self, _server: Any, user: UserRow, spec: Any, _warnings: list[str]) -> Answer:
        self.alone.append(spec)
        if spec == "refused":
            raise TooMany("too many waiting jobs")
        return Answer(201, f'"{spec} alone"', 0)


class Queued:
    """The batches' queue, telling when ``expected`` submits have been put in it."""

    def __init__(self, expected: int) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._put = 0
        self.expected = expected
        self.all_in = threading.Event()

    def put(self, item: Any) -> None:
        self._queue.put(item)
        self._put += 1
        if self._put >= self.expected:
            self.all_in.set()

    def get(self, timeout: float | None = None) -> Any:
        return self._queue.get(timeout=timeout)

    def get_nowait(self) -> Any:
        return self._queue.get_nowait()

    def empty(self) -> bool:
        return self._queue.empty()


def _submit_all(world: World, specs: list[str]) -> dict[str, Answer | Exception]:
    batches = SubmitBatches(world, world.make_many, world.make_alone)  # type: ignore[arg-type]
    queued = batches._queue = Queued(1 + len(specs))  # type: ignore[assignment]
    outcomes: dict[str, Answer | Exception] = {}

    def submit(spec: str) -> None:
        try:
            outcomes[spec] = batches.submit(UserRow(id=len(spec), name=spec), spec, [])  # type: ignore[arg-type]
        except Exception as error:  # noqa: BLE001 - the test looks at it
            outcomes[spec] = error

    first = threading.Thread(target=submit, args=("first",))
    first.start()
    assert world.first_in.wait(scaled(30))
    others = [threading.Thread(target=submit, args=(spec,)) for spec in specs]
    for thread in others:
        thread.start()
    assert queued.all_in.wait(scaled(30))  # every other submit queued behind the first
    world.go.set()
    for thread in [first, *others]:
        thread.join(scaled(30))
    return outcomes


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_submits_that_queue_together_share_one_transaction_and_a_refused_one_is_refused_alone(db: Database) -> None:
    world = World(db)
    outcomes = _submit_all(world, ["a", "bb", "refused", "cccc"])
    assert [outcomes[s].body for s in ("first", "a", "bb", "cccc")] == ['"first"', '"a"', '"bb"', '"cccc"']
    assert isinstance(outcomes["refused"], TooMany)
    assert world.sessions["a"] is world.sessions["bb"] is world.sessions["cccc"] is world.sessions["refused"]
    assert world.sessions["first"] is not world.sessions["a"]
    assert world.wakes == 2 and world.alone == []  # once per batch that made a job


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_batch_that_fails_is_made_again_one_submit_at_a_time(db: Database) -> None:
    world = World(db, fail_batch=True)
    outcomes = _submit_all(world, ["a", "refused", "bb"])
    assert outcomes["first"].body == '"first"'
    assert {s: outcomes[s].body for s in ("a", "bb")} == {"a": '"a alone"', "bb": '"bb alone"'}
    assert isinstance(outcomes["refused"], TooMany)
    assert sorted(world.alone) == ["a", "bb", "refused"]


def test_a_batch_reads_its_checks_once_writes_its_jobs_together_and_counts_its_own_jobs(db: Database,
                                                                                         tmp_path: Any) -> None:
    """``submission``'s batch on a real store: its submits' checks read once per batch, not
    per submit (the owners' waiting jobs, their limits, the VCs), its jobs and events
    written together on PostgreSQL; each submit still checked as if alone after those
    before it: the waiting-jobs limit counts the batch's own jobs, and a refused submit
    writes nothing."""
    from api.harness import make_api
    from sqlalchemy import event, func, select

    from trainyard.services import submission
    from trainyard.services.jobs import SubmitLimits
    from trainyard.spec.loading import validate_job
    from trainyard.store.rows import JobEventRow, JobRow

    api = make_api(db, tmp_path)
    api.ctx.submit_limits = SubmitLimits(max_waiting_jobs=3)
    with db.session() as session:
        alice = session.scalars(select(UserRow).where(UserRow.name == "alice")).one()
        admin = session.scalars(select(UserRow).where(UserRow.name == "admin")).one()
    spec = validate_job({"name": "b", "taskRoles": {"w": {"resourcePerInstance": {"gpu": 1}, "commands": ["true"]}}})
    huge = validate_job({"name": "h", "taskRoles": {"w": {"resourcePerInstance": {"gpu": 64}, "commands": ["true"]}}})
    batch = [(alice, spec, []), (alice, huge, []), (alice, spec, []), (alice, spec, []), (alice, spec, []),
             (admin, spec, ["kept"])]
    statements: list[str] = []
    def record(*args: Any) -> None:
        statements.append(args[2])

    event.listen(db.engine, "before_cursor_execute", record)
    with db.session() as session:
        outcomes = submission._submit_many(session, api.ctx, batch)
    event.remove(db.engine, "before_cursor_execute", record)
    made = [o for o in outcomes if not isinstance(o, Exception)]
    assert [type(o).__name__ for o in outcomes] == ["Answer", "Invalid", "Answer", "Answer", "TooMany", "Answer"]
    assert "alice has 3 jobs waiting" in str(outcomes[4])
    assert '"warnings":["kept"]' in made[-1].body
    with db.session() as session:
        assert sorted(session.scalars(select(JobRow.id))) == sorted(o.job_id for o in made)
        assert session.scalar(select(func.count()).select_from(JobEventRow)) == 4
    inserts = [s for s in statements if s.lstrip().upper().startswith("INSERT")]
    reads = [s for s in statements if s.lstrip().upper().startswith("SELECT")]
    assert len(reads) <= 5  # owners locked (PostgreSQL), their waiting jobs, their limits, the VCs: per batch
    if db.engine.dialect.name == "postgresql":  # SQLite's RETURNING cannot order a many-row insert: a row each
        assert len(inserts) == 2


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_queued_submit_cannot_be_cancelled_by_a_caller_that_stops_waiting(db: Database) -> None:
    """The API awaits ``queue``'s future on its event loop; a request given up (its task
    cancelled) must not cancel the future, which the batch thread then could not answer."""
    world = World(db)
    world.go.set()
    batches = SubmitBatches(world, world.make_many, world.make_alone)  # type: ignore[arg-type]
    answer = batches.queue(UserRow(id=1, name="a"), "a", [])  # type: ignore[arg-type]
    assert not answer.cancel()
    assert answer.result(timeout=scaled(30)).body == '"a"'
