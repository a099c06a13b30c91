"""The real elastic-training scenario of issue 34, on any backend (``tests/controller/
test_elastic_training.py`` runs it on the local backend, ``tests/backends/slurm/
test_slurm_elastic.py`` on Slurm): ``examples/elastic``'s CPU PyTorch DDP job (gloo, a fixed
global batch) starts on one worker while the other GPUs are busy, grows to three when a
job's stop frees two or more, shrinks to two when a prod job needs a GPU, and ends with the
same steps and — within float rounding — the loss of the same steps on one process.

The training is gated on the resizes, not on wall time: train.py's ``--wait-for-resize``
stops the run on one worker at step ``GROWN`` and on three at ``SHRUNK`` until the
controller resizes it, so each size trains its steps whatever the machine's load, and the
run can be short."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import yaml
from e2e.server import wait_until
from worlds import World

from trainyard.store.rows import JobRow

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "elastic"
STEPS = 24
GROWN, SHRUNK = 8, 16  # the steps it trains to on one worker, and on three, before it is resized
# Seconds between the controller cycles the test runs while it waits: most waits are for
# torch to start in the workers, and a cycle costs ~6-10 ms of CPU that they need (drive's
# 0.02 s kept a third of a core busy on a 2-core machine).
POLL = 0.1


def training_job(low: int, high: int) -> str:
    job = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    job["parameters"] |= {"python": sys.executable, "steps": STEPS, "stepSeconds": 0}
    role = job["taskRoles"]["worker"]
    role["instances"] = {"min": low, "max": high}
    # Submitted in process, with no working directory sent: the trainer from the checkout,
    # held at each size until the controller resizes the job.
    role["commands"] = [command.replace(" train.py ", f" {EXAMPLE / 'train.py'} ")
                        + f" --wait-for-resize 1:{GROWN} --wait-for-resize 3:{SHRUNK}" for command in role["commands"]]
    return yaml.safe_dump(job)


def progress(world: World, job_id: int) -> tuple[int, int]:
    """The step the job's rank 0 last finished and on how many workers (train.py's ``progress``)."""
    try:
        step, workers = (world.backend.job_dir(job_id) / "progress").read_text().split()
        return int(step), int(workers)
    except (FileNotFoundError, ValueError):
        return 0, 0


def trained_to(world: World, job_id: int, workers: int, step: int) -> None:
    """Drive the controller until the job has trained to ``step`` on ``workers`` (where it
    waits to be resized)."""
    def there() -> bool:
        world.cycle()
        return progress(world, job_id) == (step, workers)
    try:
        wait_until(there, timeout=120, interval=POLL,
                   what=f"job {job_id} to train to step {step} on {workers} worker(s)")
    except AssertionError as miss:
        raise AssertionError(f"{miss}\n{world.explain(job_id)}") from None


def grows_and_shrinks(world: World, hog: int, prod_gpus: int) -> tuple[JobRow, list[dict]]:
    """The scenario, once ``hog`` runs and the cluster has one GPU left: the elastic job
    starts on it, grows to three workers when ``hog`` stops, and shrinks to two for a prod
    job of ``prod_gpus`` GPUs that only fits once one worker has left. The job as it ended,
    and its ``result.json``'s sizes, checked against a run on one process."""
    assert importlib.util.find_spec("torch"), "PyTorch comes with the test extra: pip install -e '.[test]'"
    job_id = world.submit(training_job(1, 3))
    world.drive(job_id, ("RUNNING",), timeout=60, interval=POLL)
    trained_to(world, job_id, 1, GROWN)

    world.stop(hog)  # GPUs free: it grows to three
    world.drive(hog, ("STOPPED",), timeout=60, interval=POLL)
    trained_to(world, job_id, 3, SHRUNK)

    prod = world.submit("name: urgent\npriority: prod\ntaskRoles:\n  m:\n"
                        f"    resourcePerInstance: {{gpu: {prod_gpus}}}\n    commands: ['sleep 600']\n")
    world.drive(prod, ("RUNNING",), timeout=120, interval=POLL)  # it waited for one worker to leave
    job = world.drive(job_id, ("SUCCEEDED",), timeout=300, interval=POLL)
    world.stop(prod)

    got = json.loads((world.backend.job_dir(job_id) / "result.json").read_text())
    assert got["steps"] == STEPS
    # The reference: the same steps on one process, without torch.distributed.
    spec = importlib.util.spec_from_file_location("elastic_train", EXAMPLE / "train.py")
    assert spec is not None and spec.loader is not None
    trainer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trainer)
    assert got["loss"] == pytest.approx(trainer.alone(STEPS), rel=1e-4, abs=1e-6)
    assert [(s["workers"], s["from"]) for s in got["sizes"]] == [(1, 0), (3, GROWN), (2, SHRUNK)], \
        f"{got['sizes']}\n{world.explain(job_id)}"
    assert job.attempt == 0 and job.retries_used == 0  # resized in place: one attempt throughout
    messages = [message for kind, message in world.events(job_id) if kind == "resized"]
    assert len(messages) >= 2
    assert messages[0].startswith("grows from 1 to 3 worker(s)")
    assert messages[1].startswith(f"shrinks from 3 to 2 worker(s): job {prod} of VC default (prod) needs")
    # The worker that left ended STOPPED, as told; the GPU it held went to the prod job.
    left = [t for t in world.tasks(job_id) if t.removed]
    assert len(left) == 1 and left[0].state == "STOPPED"
    return job, got["sizes"]
