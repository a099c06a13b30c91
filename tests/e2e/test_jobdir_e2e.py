"""Issue 13, "Where work survives", live: a preempted job resumes from what it saved in $TRAINYARD_JOB_DIR."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from deadlines import scaled

from e2e.server import Server, wait_until
from trainyard.schemas.jobs import JobDirView

pytestmark = [pytest.mark.e2e, pytest.mark.idle_cluster]  # the worker's shared `yard up` (conftest.py)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "checkpoint-resume.yaml"
# The example's step, 0.5 s, leaves its first attempt 20 s to be preempted in; the attempt
# after that steps 10 times faster, so that it does not spend the test's time sleeping
# through the remaining ~35 steps. Everything else is the example as shipped.
SLEEP = "time.sleep(0.5)"
FAST_RESUME = 'time.sleep(0.5 if os.environ["TRAINYARD_ATTEMPT"] == "0" else 0.05)'
_EMPTY = JobDirView(bytes=0, files=0, complete=True, measuredAt=datetime.now(UTC), removeAfter=None)


def steps_saved(log: bytes) -> int:
    """The last step the example's log reports having reached (its first line counts too)."""
    found = re.findall(rb"(?:starting at|saved) step (\d+)", log)
    return int(found[-1]) if found else 0


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_preempted_job_resumes_from_its_saved_step_not_from_zero(server: Server) -> None:
    client = server.admin()
    example = EXAMPLE.read_text()
    assert example.count(SLEEP) == 1
    job_id = client.submit(example.replace(SLEEP, FAST_RESUME)).id  # priority: oppo, one GPU
    wait_until(lambda: client.job(job_id).state == "RUNNING", what="the example to start")
    # A few steps in: the checkpoint holds more than zero.
    wait_until(lambda: (client.job(job_id).jobDir or _EMPTY).files > 0, what="a first checkpoint")
    wait_until(lambda: b"attempt 0: starting at step 0" in client.logs(job_id), what="the first attempt's log")

    # A prod job that needs every GPU preempts the opportunistic one, runs, and ends.
    prod = client.submit("""
name: needs-every-gpu
priority: prod
taskRoles:
  w:
    resourcePerInstance: {gpu: 4, cpu: 0.1, memoryMB: 64}
    commands: ['echo prod ran']
""").id
    assert client.wait(prod, timeout=scaled(60)).state == "SUCCEEDED"
    first = client.job(job_id).attempts[0]
    assert first.state == "PREEMPTED"
    saved = steps_saved(client.logs(job_id, attempt=0))
    assert b"saved step" in client.logs(job_id, attempt=0)  # its SIGTERM handler ran
    assert saved > 0

    done = client.wait(job_id, timeout=scaled(90))
    assert done.state == "SUCCEEDED" and done.attempt >= 1
    resumed = client.logs(job_id, attempt=1)
    assert resumed.startswith(f"attempt 1: starting at step {saved}\n".encode()), resumed[:200]
    assert b"done: 40 steps" in client.logs(job_id)

    # Its directory, with the checkpoint, stays after the job (for the retention) and shows in `yard job`.
    assert done.jobDir is not None and done.jobDir.files == 1 and done.jobDir.removeAfter is not None
    shown = server.yard("job", str(job_id))
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"job dir:\s+\d+(\.\d)? (B|KiB) in 1 file\s+\(removed after ", shown.stdout), shown.stdout

    # Its results out (issue 31): listed and copied by the CLI from the job's directory,
    # which on the default install belongs to the task's account; another user is told "no job".
    listed = server.yard("ls", str(job_id))
    assert listed.returncode == 0 and re.search(r"file\s+\d+ B\s+.*\bckpt\n", listed.stdout), listed
    copied = server.yard("cp", f"{job_id}:ckpt", "-")
    assert copied.returncode == 0 and copied.stdout == "40", copied
    work = server.yard("ls", str(job_id), "--task", "main/0", "--attempt", "0")  # the account's own 0700 folder
    assert work.returncode == 0 and "main/0's working directory (attempt 0)" in work.stdout, work
    bob = server.add_users("bob")["bob"]
    refused = server.yard("cp", f"{job_id}:ckpt", "-", token=bob)
    assert refused.returncode != 0 and f"no job {job_id}" in refused.stderr
