"""Suspension proven on a real training loop (issue 16): the deterministic trainers of
``examples/suspend-resume/`` run under the real controller and local backend, once
uninterrupted and once suspended twice mid-run — by a higher-priority job that needs the
GPUs, and by their owner (``yard suspend`` / ``yard resume``) — and end with the very
parameters and loss, bit for bit, having resumed each time from where they stopped.

The suspensions are awaited, not raced: the trainers' ``--wait-for-suspend`` stops the first
attempt before step ``FIRST_STOP`` and the second before ``SECOND_STOP`` until they are asked
to suspend, so the run never ends before a suspension whatever the machine's load, and it
can be short."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import yaml
from e2e.server import wait_until
from worlds import World

from trainyard.backends.local.backend import LocalBackend
from trainyard.core.clock import SystemClock
from trainyard.services import admin, suspension
from trainyard.services.specs import StoredSpecs

CLOCK = SystemClock()
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "suspend-resume"
STEPS = 30
FIRST_STOP, SECOND_STOP = 10, 20  # where the prod job, then the owner, suspend it
# Seconds between the controller cycles the test runs while it waits: most waits are for a
# trainer to start, and a cycle costs ~6-10 ms of CPU that it needs (drive's 0.02 s kept a
# third of a core busy on a 2-core machine).
POLL = 0.1


@pytest.fixture
def world(make_world) -> World:
    world = make_world(gpus=2, clock=CLOCK)
    with world.db.session() as s:
        # A VC of the two GPUs: within a VC a higher priority may preempt a lower one.
        admin.create_vc(s, "team", gpus=2, model=None, preemption=True, clock=CLOCK)
        admin.grant_vc(s, "team", "alice")
    return world


def training_job(trainer: str, *wait_for_suspend: int) -> str:
    """examples/suspend-resume/job.yaml, told where the example is and which Python runs it
    (this one, which has NumPy and PyTorch), and where to wait to be suspended."""
    job = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    job["defaults"] = {"virtualCluster": "team"}
    job["parameters"] |= {"exampleDir": str(EXAMPLE), "trainer": trainer, "python": sys.executable,
                          "steps": STEPS, "stepSeconds": 0}
    role = job["taskRoles"]["train"]
    role["commands"] = [command + "".join(f" --wait-for-suspend {step}" for step in wait_for_suspend)
                        for command in role["commands"]]
    return yaml.safe_dump(job)


def progress(backend: LocalBackend, job_id: int) -> int:
    try:
        return int((backend.job_dir(job_id) / "progress").read_text())
    except (FileNotFoundError, ValueError):
        return 0


def trained_to(world: World, job_id: int, step: int) -> None:
    """Drive the controller until the job has trained to ``step`` (where it waits to be suspended)."""
    def there() -> bool:
        world.cycle()
        return progress(world.backend, job_id) == step
    wait_until(there, timeout=60, interval=POLL, what=f"job {job_id} to train to step {step}")


def result_of(backend: LocalBackend, job_id: int) -> dict:
    return json.loads((backend.job_dir(job_id) / "result.json").read_text())


def test_a_numpy_training_loop_suspended_twice_ends_bit_for_bit_as_an_uninterrupted_one(world):
    suspend_twice_and_compare(world, "train_numpy.py")


# The database plays no part in what this one adds (PyTorch's checkpoints), and each of its
# attempts spends seconds importing torch: SQLite only; the NumPy loop runs on both. ~10 s,
# twice that on a busy machine: more than the suite's 120 s default is allowed.
@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_pytorch_training_loop_suspended_twice_ends_bit_for_bit_as_an_uninterrupted_one(world):
    assert importlib.util.find_spec("torch"), "PyTorch comes with the test extra: pip install -e '.[test]'"
    suspend_twice_and_compare(world, "train_torch.py")


def suspend_twice_and_compare(world, trainer: str) -> None:
    backend = world.backend

    # The reference: the same loop, never interrupted, on the other GPU while the job trains
    # to where it waits to be suspended.
    reference = world.submit(training_job(trainer))
    job_id = world.submit(training_job(trainer, FIRST_STOP, SECOND_STOP))
    assert world.drive(reference, ("SUCCEEDED",), timeout=120, interval=POLL).attempt == 0
    expected = result_of(backend, reference)
    assert expected["steps"] == STEPS and expected["segments"] == [
        {"attempt": 0, "from": 0, "to": STEPS, "ended": "finished"}]
    trained_to(world, job_id, FIRST_STOP)

    # 1. A prod job needs both GPUs: the scheduler suspends the training job, which saves
    # and waits; once the prod job has ended it resumes on its own as attempt 1.
    prod = world.submit("name: urgent\npriority: prod\ndefaults: {virtualCluster: team}\n"
                        "taskRoles:\n  m:\n    resourcePerInstance: {gpu: 2}\n    commands: ['true']\n")
    world.drive(job_id, ("SUSPENDED",), interval=POLL)
    assert world.drive(prod, ("SUCCEEDED",), interval=POLL).state == "SUCCEEDED"
    world.drive(job_id, ("RUNNING",), until=lambda j: j.attempt == 1, interval=POLL)
    trained_to(world, job_id, SECOND_STOP)

    # 2. Its owner suspends it (yard suspend), and resumes it (yard resume) once it waits.
    suspension.suspend_job(world.db, world.alice, job_id, specs=StoredSpecs(), clock=CLOCK)
    assert world.drive(job_id, ("SUSPENDED",), interval=POLL).held_by == "alice"
    suspension.resume_job(world.db, world.alice, job_id, clock=CLOCK)
    job = world.drive(job_id, ("SUCCEEDED",), timeout=120, interval=POLL)

    got = result_of(backend, job_id)
    assert (got["loss"], got["sha256"], got["steps"]) == (expected["loss"], expected["sha256"], STEPS)
    # It resumed each time from the step it had saved, never from the start.
    segments = got["segments"]
    assert [s["attempt"] for s in segments] == [0, 1, 2]
    assert [(s["from"], s["to"]) for s in segments] == [
        (0, FIRST_STOP), (FIRST_STOP, SECOND_STOP), (SECOND_STOP, STEPS)]
    # Told by the runtime's request file (the reason is Trainyard's), not by a stop.
    assert [s["ended"] for s in segments] == [
        f"suspended: preempted by job {prod} of higher priority (prod) in VC team", "suspended: suspended by alice",
        "finished"]

    assert job.attempt == 2 and job.retries_used == 0
    assert [a.state for a in world.attempts(job_id)] == ["SUSPENDED", "SUSPENDED", "SUCCEEDED"]
    events = [(kind, message) for kind, message in world.events(job_id)
              if kind in ("suspend-requested", "suspended", "resume-requested")]
    assert [kind for kind, _ in events] == [
        "suspend-requested", "suspended", "suspend-requested", "suspended", "resume-requested"]
    assert f"job {prod}" in events[0][1] and "suspended by alice" in events[2][1]
    assert "resume requested by alice" in events[4][1]

