"""Elastic jobs proven on a real training loop (issue 34): ``examples/elastic``'s CPU
PyTorch DDP job (gloo, a fixed global batch) under the real controller and local backend
starts on one worker while the other GPUs are busy, grows to three when they free, shrinks
to two when a prod job needs a GPU, and ends with the same steps and — within float
rounding — the loss of the same steps on one process."""

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

CLOCK = SystemClock()
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "elastic"
STEPS = 300


def training_job(low: int, high: int) -> str:
    job = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    job["parameters"] |= {"exampleDir": str(EXAMPLE), "python": sys.executable, "steps": STEPS, "stepSeconds": 0.05}
    job["taskRoles"]["worker"]["instances"] = {"min": low, "max": high}
    return yaml.safe_dump(job)


def progress(backend: LocalBackend, job_id: int) -> tuple[int, int]:
    try:
        step, workers = (backend.job_dir(job_id) / "progress").read_text().split()
        return int(step), int(workers)
    except (FileNotFoundError, ValueError):
        return 0, 0


def training_on(world: World, job_id: int, workers: int, past: int) -> int:
    """Drive the controller until the job trains on ``workers`` past step ``past``; the step."""
    def there() -> int | bool:
        world.cycle()
        step, size = progress(world.backend, job_id)
        return step > past and size == workers and step
    try:
        return wait_until(there, timeout=120, what=f"job {job_id} to train on {workers} worker(s) past step {past}")
    except AssertionError as miss:
        raise AssertionError(f"{miss}\n{world.explain(job_id)}") from None


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_ddp_job_grows_into_freed_gpus_and_shrinks_for_a_prod_job_with_the_same_steps_and_loss(make_world):
    assert importlib.util.find_spec("torch"), "PyTorch comes with the test extra: pip install -e '.[test]'"
    world = make_world(gpus=3, clock=CLOCK)
    backend = world.backend

    hog = world.submit("name: hog\ntaskRoles:\n  h:\n    resourcePerInstance: {gpu: 2}\n    commands: ['sleep 600']\n")
    world.drive(hog, ("RUNNING",))
    job_id = world.submit(training_job(1, 3))
    world.drive(job_id, ("RUNNING",))
    step = training_on(world, job_id, 1, 20)

    world.stop(hog)  # two GPUs free: it grows to three
    world.drive(hog, ("STOPPED",))
    step = training_on(world, job_id, 3, step)

    prod = world.submit("name: urgent\npriority: prod\ntaskRoles:\n  m:\n    resourcePerInstance: {gpu: 1}\n"
                        "    commands: ['sleep 600']\n")
    world.drive(prod, ("RUNNING",), timeout=120)  # it waited for one worker to leave
    step = training_on(world, job_id, 2, step)
    assert step < STEPS - 20, "the run was too short to see every size"
    job = world.drive(job_id, ("SUCCEEDED",), timeout=300)
    world.stop(prod)

    got = json.loads((backend.job_dir(job_id) / "result.json").read_text())
    assert got["steps"] == STEPS
    # The reference: the same steps on one process, without torch.distributed.
    spec = importlib.util.spec_from_file_location("elastic_train", EXAMPLE / "train.py")
    assert spec is not None and spec.loader is not None
    trainer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trainer)
    assert got["loss"] == pytest.approx(trainer.alone(STEPS), rel=1e-4, abs=1e-6)
    assert [s["workers"] for s in got["sizes"]] == [1, 3, 2], f"{got['sizes']}\n{world.explain(job_id)}"
    assert job.attempt == 0 and job.retries_used == 0  # resized in place: one attempt throughout
    kinds = [kind for kind, _ in world.events(job_id)]
    assert kinds.count("resized") >= 2
    messages = [message for kind, message in world.events(job_id) if kind == "resized"]
    assert messages[0].startswith("grows from 1 to 3 worker(s)")
    assert messages[1].startswith("shrinks from 3 to 2 worker(s)") and f"job {prod}" in messages[1]
    # The worker that left ended STOPPED, as told; the GPU it held went to the prod job.
    left = [t for t in world.tasks(job_id) if t.removed]
    assert len(left) == 1 and left[0].state == "STOPPED"
