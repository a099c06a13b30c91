"""`yard usage` and `yard job`'s efficiency line on a real `yard up` (its own subprocess,
real tasks on simulated GPUs): the hours a finished job held, n/a where no GPU utilisation
exists, and the very same report from the restarted server."""

from __future__ import annotations

import json

import pytest
from deadlines import scaled

from e2e.server import Server

pytestmark = pytest.mark.e2e

JOB = """
name: held
taskRoles:
  main:
    instances: 2
    resourcePerInstance: {gpu: 1, cpu: 1, memoryMB: 1024}
    commands: ['sleep 1']
"""


def test_usage_of_a_finished_job_is_what_it_held_and_survives_a_restart(server: Server) -> None:
    client = server.admin()
    job = client.submit(JOB)
    done = client.wait(job.id, timeout=scaled(60))
    tasks = done.attempts[-1].tasks
    held = sum((t.finishedAt - t.startedAt).total_seconds() for t in tasks if t.startedAt and t.finishedAt) / 3600
    assert held > 0

    shown = server.yard("usage", "--by", "job", "--since", "1d", "--json")
    assert shown.returncode == 0, shown.stderr
    [line] = json.loads(shown.stdout)["lines"]
    assert line["name"] == str(job.id) and line["jobName"] == "held"
    assert line["gpuHours"] == pytest.approx(held) and line["cpuHours"] == pytest.approx(held)
    assert line["memoryGibHours"] == pytest.approx(held)
    assert line["gpuEfficiency"] is None  # simulated GPUs: n/a, never invented

    detail = server.yard("job", str(job.id))
    assert detail.returncode == 0 and "Efficiency: GPU n/a of " in detail.stdout

    before = client.usage(by="user", since=done.submittedAt, until=done.finishedAt)
    server.stop()
    server.start()
    after = server.admin().usage(by="user", since=done.submittedAt, until=done.finishedAt)
    assert after == before and before.lines[0].gpuHours == pytest.approx(held)
