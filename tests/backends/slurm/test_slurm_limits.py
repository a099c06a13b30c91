"""On the Slurm dev cluster, a job's memoryMB is its step's --mem, enforced by Slurm's
task/cgroup plugin (``scripts/dev-slurm.sh``); a task killed at that limit ends
OUT_OF_MEMORY with the limit in its job's message."""

from __future__ import annotations

from sqlalchemy import select

from slurm.cluster import drive, submit
from trainyard.backends.base import TaskKey
from trainyard.store.rows import AttemptRow, TaskRow

JOB = """
name: {name}
jobRetryCount: 0
taskRoles:
  main:
    resourcePerInstance: {{gpu: 0, cpu: 1, memoryMB: 64}}
    commands:
      - python3 -c "b = b'x' * ({mb} << 20); print('allocated {mb} MiB')"
"""
MESSAGE = "OUT_OF_MEMORY: used more than its 64 MiB memory limit (memoryMB: 64) and was killed (exit 137)"


def test_a_task_using_more_memory_than_it_asked_ends_out_of_memory(world) -> None:
    job_id = submit(world, JOB.format(name="hog", mb=300))
    job = drive(world, job_id, timeout=60)
    assert (job.state, job.exit_code) == ("FAILED", 137)
    assert job.state_message == f"1 task(s) of role main failed (minFailedInstances=1); task main/0 {MESSAGE}"
    with world.db.session() as s:
        task = s.scalars(select(TaskRow).where(TaskRow.job_id == job_id)).one()
        attempt = s.scalars(select(AttemptRow).where(AttemptRow.job_id == job_id)).one()
        assert (task.state, task.message) == ("FAILED", MESSAGE) and MESSAGE in attempt.reason
    log = world.backend.read_log(TaskKey(job_id, 0, "main", 0)).data.decode()
    assert "\nallocated 300 MiB" not in log


def test_a_task_within_its_memory_runs_untouched(world) -> None:
    job_id = submit(world, JOB.format(name="fits", mb=16))
    job = drive(world, job_id, timeout=60)
    assert (job.state, job.exit_code) == ("SUCCEEDED", 0), job.state_message
    log = world.backend.read_log(TaskKey(job_id, 0, "main", 0)).data.decode()
    assert log == "allocated 16 MiB\n"
