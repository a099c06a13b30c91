"""`yard job ID --metrics` against the real app and store: a table per task of now / mean /
max with a sparkline, "n/a" where a figure was not measured, JSON for scripts, and the
server's 422 on a bad window shown as a usage error."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from api.harness import Api

from trainyard.cli.exits import EXIT_USAGE
from trainyard.cli.history_render import sparkline
from trainyard.core.clock import FakeClock
from trainyard.store.rows import TaskSampleRow

Yard = Callable[..., tuple[int, str, str]]
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
JOB = "name: m\ntaskRoles:\n  worker:\n    instances: 1\n    commands: ['true']\n"


def measured_job(api: Api) -> int:
    """Alice's job: 10 raw samples, CPU rising 1..10 cores, 1 GiB then 2 GiB, GPU not measured."""
    api.ctx.clock = FakeClock(NOW)
    response = api.user.post("/api/v1/jobs", content=JOB, headers={"content-type": "application/yaml"})
    job_id = int(response.json()["id"])
    with api.ctx.db.session() as session:
        session.add_all(TaskSampleRow(job_id=job_id, attempt=0, role="worker", index=0, node="n1", step=0,
                                      at=NOW - timedelta(seconds=100 - 10 * i), cpu_cores=float(i + 1),
                                      memory_mb=1024 if i < 5 else 2048, gpus_held=1.0, gpu_util_pct=None)
                        for i in range(10))
    return job_id


@pytest.mark.postgres
def test_yard_job_metrics_shows_now_mean_and_max_per_task_with_na(api: Api, yard: Yard) -> None:
    job_id = measured_job(api)
    code, out, err = yard("job", str(job_id), "--metrics", "--since", "15m")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"Job {job_id}:") and lines[0].endswith("(raw samples)")
    assert "worker/0  (10 points)" in out
    rows = {line.split("  ")[0]: line.split() for line in lines if line.startswith(("GPU", "CPU", "Memory"))}
    assert rows["GPU util"][2:5] == ["n/a", "n/a", "n/a"]  # simulated: never a made-up 0 %
    assert rows["CPU cores"][2:5] == ["10.00", "5.50", "10.00"]
    assert rows["Memory"][1:7] == ["2.0", "GiB", "1.5", "GiB", "2.0", "GiB"]
    assert rows["CPU cores"][5] == sparkline([float(i) for i in range(1, 11)])


def test_yard_job_metrics_json_is_the_apis_answer(api: Api, yard: Yard) -> None:
    job_id = measured_job(api)
    code, out, _ = yard("job", str(job_id), "--metrics", "--json")
    assert code == 0
    assert '"gpuUtilPct": null' in out and '"step": 0' in out


def test_a_window_with_nothing_in_it_says_why_it_may_be_empty(api: Api, yard: Yard) -> None:
    job_id = measured_job(api)
    code, out, _ = yard("job", str(job_id), "--metrics", "--since", "2h", "--until", "1h")
    assert code == 0 and "no samples in this window" in out


def test_a_bad_since_is_refused_naming_it(api: Api, yard: Yard) -> None:
    job_id = measured_job(api)
    code, _, err = yard("job", str(job_id), "--metrics", "--since", "last week")
    assert code != 0 and "since" in err
    code, _, err = yard("job", str(job_id), "--since", "1h")
    assert code == EXIT_USAGE and "--metrics" in err


def test_a_sparkline_scales_to_its_max_and_leaves_gaps_for_what_was_not_measured() -> None:
    assert sparkline([0.0, 4.0, None, 8.0]) == "▁▅ █"
    assert sparkline([None, None]) == ""
    assert len(sparkline([float(i) for i in range(100)], width=30)) == 25  # 4 values a bar
