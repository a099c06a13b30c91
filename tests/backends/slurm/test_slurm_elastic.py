"""Elastic jobs on Slurm (issue 34): the real DDP scenario of ``tests/elastic_training.py``
on the dev cluster, each worker a Slurm job of its own (``SlurmBackend.launch_gang``). The
other GPUs are held so that the job starts on one GPU of one node, grows onto another node
when a job there stops (the rendezvous is the first worker's node address, reached across
nodes) and shrinks to two for a prod job that fits only once a worker's Slurm job has ended."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from e2e.server import wait_until
from elastic_training import grows_and_shrinks
from worlds import World

from slurm.cluster import explain, slurm_job
from trainyard.backends.base import TaskKey, TaskLaunch
from trainyard.backends.slurm.backend import ELASTIC
from trainyard.backends.slurm.jobstate import FINAL_STATES
from trainyard.core.clock import SystemClock


@dataclass
class SlurmWorld(World):
    """``tests/worlds.py``'s world on the Slurm test world's store, backend and controller,
    whose misses say what Slurm and the task folders say (``cluster.explain``)."""

    cluster: Any = None  # conftest's World

    def explain(self, job_id: int) -> str:
        return explain(self.cluster, job_id)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_ddp_job_grows_across_nodes_and_shrinks_for_a_prod_job_on_slurm_with_the_same_steps_and_loss(world):
    ours = SlurmWorld(world.db, world.backend, SystemClock(), world.controller,  # type: ignore[arg-type]
                      {world.user.name: world.user}, cluster=world)
    # 16 GPUs on four nodes: two whole nodes, three GPUs of a third and the whole fourth held,
    # so that the job starts on the third's last GPU and grows onto the fourth.
    # Placed in one cycle, in this order (each the best fit: the nodes left empty first).
    held = [ours.submit(f"name: {name}\ntaskRoles:\n  h:\n    {role}\n    commands: ['sleep 600']\n")
            for name, role in (("fill", "instances: 2\n    resourcePerInstance: {gpu: 4}"),
                               ("rest", "resourcePerInstance: {gpu: 3}"), ("hog", "resourcePerInstance: {gpu: 4}"))]
    for job_id in held:
        ours.drive(job_id, ("RUNNING",), timeout=60)
    hog = held[-1]
    job, _ = grows_and_shrinks(ours, hog, prod_gpus=3)

    workers = [t for t in ours.tasks(job.id) if t.role == "worker"]
    assert len({t.node for t in workers}) == 2, [(t.index, t.node) for t in workers]  # across nodes
    # Each worker run was a Slurm job of its own (its submission marked elastic): the one
    # that left had its own job cancelled, and no gang job held the others' GPUs.
    attempt_dir = world.backend.state_dir / "jobs" / str(job.id) / "0"
    assert not (attempt_dir / "slurm-gang").exists()
    runs = sorted(d.name for d in attempt_dir.glob("slurm-worker-*") if (d / ELASTIC).exists())
    assert {"slurm-worker-0-0", "slurm-worker-1-0", "slurm-worker-2-0"} <= set(runs), runs


def test_an_elastic_worker_is_a_slurm_job_of_its_own_stopped_alone_and_ended_once_slurm_ended_it(world, slurm):
    backend = world.backend
    ps = TaskLaunch(TaskKey(5, 0, "ps", 0), "n1", "sleep 600\n", {}, memory_mb=16)
    workers = [TaskLaunch(TaskKey(5, 0, "worker", i), "n1", "sleep 600\n", {}, memory_mb=16, elastic=True)
               for i in range(2)]
    backend.launch_gang([ps, *workers])
    jobs = {t.key: backend.slurm_job_id(t.key) for t in (ps, *workers)}
    assert len(set(jobs.values())) == 3  # the other role's gang, and one per worker

    def slurm_state(key: TaskKey) -> str:
        return next((r["JobState"] for r in slurm_job(slurm, jobs[key] or "")), "GONE")

    keys = list(jobs)
    wait_until(lambda: all(slurm_state(k) == "RUNNING" for k in keys), timeout=30, what="the three Slurm jobs to run")
    leaving = workers[1].key
    # Its task has exited (its exit status recorded) while Slurm still holds its job: it has
    # not ended for Trainyard, whose scheduler would give its GPUs away.
    (backend.task_dir(leaving) / "exit").write_text("0\n")
    status = backend.observe([leaving])[leaving]
    assert status.running and "waiting for Slurm to end job" in status.message

    backend.stop(leaving, 0.0)
    wait_until(lambda: not backend.observe([leaving])[leaving].running, timeout=30, what="the leaving worker to end")
    assert slurm_state(leaving) in FINAL_STATES | {"GONE"}
    # The other worker and the other role's task were not touched.
    assert all(backend.observe([k])[k].running and slurm_state(k) == "RUNNING" for k in keys if k != leaving)
