"""$TRAINYARD_JOB_DIR on the Slurm backend: on the shared state directory, kept across attempts."""

from __future__ import annotations

from pathlib import Path

from slurm.cluster import drive, submit
from trainyard.backends.base import TaskKey


def test_the_job_dir_is_on_the_shared_state_dir_and_the_retry_finds_what_the_first_attempt_saved(world) -> None:
    job_id = submit(
        world,
        """
name: resumes
jobRetryCount: 1
taskRoles:
  main:
    instances: 2
    commands:
      - echo "dir $TRAINYARD_JOB_DIR"
      - echo "attempt $TRAINYARD_ATTEMPT" >> "$TRAINYARD_JOB_DIR/seen-by-$TRAINYARD_TASK_INDEX"
      - cat "$TRAINYARD_JOB_DIR/seen-by-$TRAINYARD_TASK_INDEX"
      - test "$TRAINYARD_ATTEMPT" -ge 1
""",
    )
    job = drive(world, job_id)
    assert job.state == "SUCCEEDED" and job.attempt == 1
    backend = world.backend
    job_dir = backend.job_dir(job_id)
    assert job_dir.parent.parent == backend.state_dir / "jobs"
    for index in (0, 1):
        log = backend.read_log(TaskKey(job_id, 1, "main", index)).data.decode().splitlines()
        # The retry found what the first attempt wrote, in the one directory of both tasks.
        assert log == [f"dir {job_dir}", "attempt 0", "attempt 1"]
    assert sorted(p.name for p in job_dir.iterdir()) == ["seen-by-0", "seen-by-1"]
    usage = backend.job_dir_usage(job_id)
    assert usage is not None and usage.files == 2
    assert backend.job_dir_ids() == [job_id]
    works = [backend.work_dir(TaskKey(job_id, attempt, "main", index)) for attempt in (0, 1) for index in (0, 1)]
    # Without accounts its secrets' folder is in the task's folder too (with accounts, beside it).
    works += [w.parent / "secrets" for w in works if w.name == "work" and (w.parent / "secrets").is_dir()]
    assert all(work.is_dir() for work in works)
    backend.remove_job_dir(job_id)
    # The tasks' records (their logs) stay; their working directories go with the job's.
    assert not job_dir.exists() and Path(backend.task_dir(TaskKey(job_id, 1, "main", 0))).exists()
    assert not any(work.exists() for work in works)
    assert backend.read_log(TaskKey(job_id, 1, "main", 0)).data.decode().splitlines()[-1] == "attempt 1"
