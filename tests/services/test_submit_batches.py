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
    """A server as the batches see it, whose ``make_in`` blocks the first submit until told,
    so that the others queue behind it and share a batch."""

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

    def make_in(self, session: Any, _server: Any, user: UserRow, spec: Any, _warnings: list[str]) -> Answer:
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
    batches = SubmitBatches(world, world.make_in, world.make_alone)  # type: ignore[arg-type]
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
