"""Through a real ``yard up`` (as root: per-user task accounts and the bubblewrap sandbox):
a task's memoryMB is enforced, and one that uses more ends OUT_OF_MEMORY, which the job's
message and ``yard job`` say with the limit."""

from __future__ import annotations

import json

import pytest
from deadlines import scaled

from e2e.server import Server
from trainyard.backends import cgroups

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.idle_cluster,  # the worker's shared `yard up` (conftest.py)
    pytest.mark.skipif(isinstance(cgroups.detect(), str), reason="no usable cgroups on this machine"),
]

JOB = """
name: {name}
jobRetryCount: {retries}
taskRoles:
  main:
    resourcePerInstance: {{cpu: 1, memoryMB: 64}}
    commands:
      - python3 -c "b = b'x' * ({mb} << 20); print('allocated {mb} MiB')"
"""
MESSAGE = "OUT_OF_MEMORY: used more than its 64 MiB memory limit (memoryMB: 64) and was killed (exit 137)"


def test_a_job_using_more_memory_than_it_asked_fails_out_of_memory_and_yard_job_says_so(server: Server) -> None:
    out = server.yard("submit", "-", "--json", input=JOB.format(name="hog", retries=1, mb=300))
    assert out.returncode == 0, out.stderr
    job_id = json.loads(out.stdout)["id"]
    server.yard("wait", str(job_id), "--timeout", "60")

    job = json.loads(server.yard("job", str(job_id), "--json").stdout)
    assert (job["state"], job["exitCode"]) == ("FAILED", 137)
    assert job["message"] == f"1 task(s) of role main failed (minFailedInstances=1); task main/0 {MESSAGE}"
    # The job's own failure: its one job retry was spent on it, as on any other failure.
    assert len(job["attempts"]) == 2
    for attempt in job["attempts"]:
        assert attempt["tasks"][0]["message"] == MESSAGE and MESSAGE in attempt["reason"]
    retried = [e["message"] for e in job["events"] if e["kind"] == "retried"]
    assert len(retried) == 1 and MESSAGE in retried[0]

    shown = server.yard("job", str(job_id))
    assert shown.returncode == 0 and MESSAGE in shown.stdout, shown.stdout


def test_a_job_within_its_memory_runs_untouched(server: Server) -> None:
    job_id = server.admin().submit(JOB.format(name="fits", retries=0, mb=16)).id
    job = server.admin().wait(job_id, timeout=scaled(60))
    assert (job.state, job.exitCode) == ("SUCCEEDED", 0), job.message
    assert server.admin().logs(job_id) == b"allocated 16 MiB\n"
