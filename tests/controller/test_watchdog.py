"""The hang watchdog (``watchdogSeconds``) on a real store and the real local backend: real
tasks write (or do not write) real logs; the controller's time is a fake clock."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from e2e.server import wait_until
from worlds import World

from trainyard.backends.base import TaskKey
from trainyard.backends.local.backend import LocalBackend
from trainyard.backends.local.gpus import simulated_gpus
from trainyard.controller.loop import Controller
from trainyard.controller.watchdog import NOT_STARTED, WATCHDOG_CHECK_SECONDS, Watchdog, WatchedAttempt
from trainyard.core.clock import FakeClock
from trainyard.core.lifecycle import MAX_PLATFORM_RETRIES
from trainyard.store.db import Database
from trainyard.store.rows import JobRow


class WatchedWorld(World):
    """The world on a fake clock, with the watchdog's view of a job's tasks and their logs."""

    def until(self, job_id: int, reached: Callable[[JobRow], bool], what: str) -> JobRow:
        """Run cycles (the clock standing still) until the job has ``reached`` a point its
        real tasks take it to."""
        return self.drive(job_id, None, until=reached, what=what)

    def running(self, job_id: int, attempt: int) -> JobRow:
        """Run cycles until the job's attempt runs all its tasks, each with its log open."""
        def runs(job: JobRow) -> bool:
            assert job.state not in ("SUCCEEDED", "FAILED", "STOPPED"), f"job {job_id} ended: {job.state_message}"
            current = [a for a in job.attempts if a.number == attempt]
            # ... and started: its node has opened its log (until then the watchdog waits).
            return job.state == "RUNNING" and bool(current) and all(
                t.state == "RUNNING" and self.backend.read_log(TaskKey(job_id, attempt, t.role, t.index, t.run),
                                                               offset=-1, limit=1).exists
                for t in current[0].tasks)
        return self.until(job_id, runs, f"attempt {attempt} running")

    def log_size(self, job_id: int, attempt: int = 0, index: int = 0) -> int:
        return self.backend.read_log(TaskKey(job_id, attempt, "m", index), offset=-1, limit=1).size

    def after(self, seconds: float) -> None:
        """Advance the controller's clock and run one cycle (the watchdog looks at most once
        per ``WATCHDOG_CHECK_SECONDS`` of it)."""
        self.clock.advance(seconds)  # type: ignore[attr-defined]
        self.controller.run_once()


@pytest.fixture
def world(make_world) -> WatchedWorld:
    return make_world(kind=WatchedWorld, clock=FakeClock(datetime.now(UTC)))


def job_file(name: str, commands: list[str], *, extra: str = "", instances: int = 1) -> str:
    lines = "".join(f"      - {c!r}\n" for c in commands)
    return (f"name: {name}\n{extra}stopGracePeriodSeconds: 1\n"
            f"taskRoles:\n  m:\n    instances: {instances}\n    commands:\n{lines}")


def test_a_task_that_prints_then_goes_silent_is_stopped_as_hung_and_runs_again_without_spending_a_retry(
    world: WatchedWorld,
) -> None:
    job_id = world.submit(job_file("quiet", ["echo started", "sleep 600"],
                                   extra="watchdogSeconds: 60\njobRetryCount: 2\n"))
    world.running(job_id, 0)
    wait_until(lambda: world.log_size(job_id) > 0, what="the task's first line")
    world.after(WATCHDOG_CHECK_SECONDS)  # the watchdog sees the line: the silence starts now
    world.after(60 - WATCHDOG_CHECK_SECONDS)
    assert world.job(job_id).attempts[0].state == "RUNNING", "silent for 55 s of 60: not yet hung"

    world.after(WATCHDOG_CHECK_SECONDS)
    job = world.job(job_id)
    assert job.attempts[0].state == "LOST"
    assert job.attempts[0].reason == "hung: no task wrote output for 60 s (watchdogSeconds: 60)"
    assert ("hung", "attempt 0 hung: no task wrote output for 60 s (watchdogSeconds: 60); "
                    "tasks get SIGTERM and 1 s to exit") in world.events(job_id)

    job = world.running(job_id, 1)
    assert job.retries_used == 0, "a hang is the platform's fault: no jobRetryCount spent"
    assert [(t.state, t.message) for t in job.attempts[0].tasks] == [
        ("STOPPED", "killed by SIGTERM (Trainyard asked it to stop)")]
    kinds = [kind for kind, _ in world.events(job_id)]
    assert kinds.index("hung") < kinds.index("platform-retried") < len(kinds) - 1
    assert kinds[-1] == "placed"


def test_a_task_that_keeps_printing_and_a_job_without_a_watchdog_are_never_flagged(world: WatchedWorld) -> None:
    # Only the first of two tasks prints: "none of its tasks writes output" is what hangs.
    chatty = world.submit(job_file("chatty", [
        'if [ "$RANK" = 0 ]; then while true; do echo tick; sleep 0.05; done; fi', "sleep 600",
    ], extra="watchdogSeconds: 10\n", instances=2))
    unwatched = world.submit(job_file("unwatched", ["sleep 600"]))
    world.running(chatty, 0)
    world.running(unwatched, 0)
    for _ in range(8):  # 48 s of the controller's time: almost five watchdog periods
        size = world.log_size(chatty)
        wait_until(lambda: world.log_size(chatty) > size, what="more output")  # noqa: B023 - used at once
        world.after(WATCHDOG_CHECK_SECONDS + 1)
    for job_id in (chatty, unwatched):
        job = world.job(job_id)
        assert (job.state, job.attempt, job.attempts[0].state) == ("RUNNING", 0, "RUNNING")
        assert "hung" not in [kind for kind, _ in world.events(job_id)]
    assert world.log_size(chatty, index=1) == 0, "its second task never wrote anything"


def test_past_its_platform_retries_a_hung_job_fails(world: WatchedWorld) -> None:
    job_id = world.submit(job_file("stuck", ["sleep 600"], extra="watchdogSeconds: 10\n"))
    for attempt in range(MAX_PLATFORM_RETRIES + 1):
        world.running(job_id, attempt)
        world.after(10)  # silent since the attempt started
    job = world.until(job_id, lambda j: j.state == "FAILED", "failed")
    assert [a.state for a in job.attempts] == ["LOST", "LOST", "LOST", "FAILED"]
    assert job.retries_used == 0
    assert job.state_message == ("hung: no task wrote output for 10 s (watchdogSeconds: 10); "
                                 "its 3 platform retries are used up, so this counts as a failure")
    assert [kind for kind, _ in world.events(job_id)].count("hung") == 4


def test_after_a_controller_restart_the_silence_counts_from_the_restart(world: WatchedWorld, db: Database) -> None:
    job_id = world.submit(job_file("across", ["sleep 600"], extra="watchdogSeconds: 10\n"))
    world.running(job_id, 0)
    world.clock.advance(30)  # the controller is down: nobody looks at the task's log meanwhile
    world.controller.stop()
    world.controller = Controller(db, world.backend, world.clock)
    world.controller.run_once()
    world.after(WATCHDOG_CHECK_SECONDS)
    assert world.job(job_id).attempts[0].state == "RUNNING", "silent 35 s, but only 5 s of it watched"
    world.after(10 - WATCHDOG_CHECK_SECONDS)
    assert world.job(job_id).attempts[0].reason == "hung: no task wrote output for 10 s (watchdogSeconds: 10)"


RUN_0, RUN_1 = TaskKey(1, 0, "m", 0, 0), TaskKey(1, 0, "m", 0, 1)


@pytest.mark.parametrize(("at_six", "then", "hung_at"), [
    pytest.param({RUN_0: 0}, {RUN_0: 0}, 10, id="a log that never grows: hung 10 s after the attempt started"),
    pytest.param({RUN_0: 1}, {RUN_0: 1}, 16, id="a log one byte longer at 6 s is output then"),
    pytest.param({RUN_1: 0}, {RUN_1: 0}, 16, id="a task re-run in place at 6 s is a sign of life (a fresh log)"),
    pytest.param({RUN_0: None}, {RUN_0: 0}, 16, id="a log unreadable at 6 s counts as output: no blind verdicts"),
    pytest.param({}, {}, None, id="an attempt with no running task never hangs"),
    pytest.param({RUN_0: NOT_STARTED}, {RUN_0: 0}, 16,
                 id="a task with no log yet at 6 s has not started (queued in Slurm): its silence starts then"),
    pytest.param({RUN_0: NOT_STARTED}, {RUN_0: NOT_STARTED}, None, id="a task that never starts never hangs"),
])
def test_what_counts_as_output(tmp_path: Path, at_six: dict[TaskKey, int | None], then: dict[TaskKey, int | None],
                               hung_at: int | None) -> None:
    clock = FakeClock()
    backend = LocalBackend(tmp_path / "local", gpus=simulated_gpus(1), cpu_milli=1000, memory_mb=1024)
    dog = Watchdog(Database(f"sqlite:///{tmp_path / 'unused.db'}"), backend, clock)
    started = clock.now()

    def look(sizes: dict[TaskKey, int | None]) -> bool:
        return bool(dog.find_hangs({(1, 0): WatchedAttempt(10, started, list(sizes))}, sizes))

    assert not look({RUN_0: 0})
    clock.advance(6)
    assert not look(at_six)
    first_hang = None
    for second in range(7, 30):
        clock.advance(1)
        if look(then):
            first_hang = second
            break
    assert first_hang == hung_at


def test_a_task_not_started_yet_has_no_log_for_the_watchdog(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "local", gpus=simulated_gpus(1), cpu_milli=1000, memory_mb=1024)
    dog = Watchdog(Database(f"sqlite:///{tmp_path / 'unused.db'}"), backend, FakeClock())
    assert dog._log_size(RUN_0) == NOT_STARTED  # launched or not, its node has not opened its log
    backend.log_path(RUN_0).parent.mkdir(parents=True)
    backend.log_path(RUN_0).write_bytes(b"")
    assert dog._log_size(RUN_0) == 0  # started, silent so far
