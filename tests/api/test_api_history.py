"""``GET /jobs/{id}/metrics`` and ``GET /nodes/{name}/metrics`` on the real app and store
(SQLite and PostgreSQL): who may see what, the window's resolution, and 422s that name the
field; and the SDK's methods over them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from api.harness import Api

from trainyard.core.clock import FakeClock
from trainyard.services.auth import create_token, create_user
from trainyard.store.rows import NodeSampleRow, TaskSampleRow

# The store answers these: they run on PostgreSQL too (tests/conftest.py).
pytestmark = pytest.mark.postgres

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
JOB = {"name": "measured", "taskRoles": {"worker": {"instances": 2, "commands": ["true"]}}}


@pytest.fixture
def measured(api: Api) -> int:
    """A job of alice's with 10 minutes of raw samples for worker/0 (a simulated GPU: no
    utilisation) and worker/1 (1.5 cores, 50 % GPU); the API's clock stopped at NOW."""
    api.ctx.clock = FakeClock(NOW)
    job_id = int(api.user.post("/api/v1/jobs", json=JOB).json()["id"])
    with api.ctx.db.session() as session:
        for i in range(60):
            at = NOW - timedelta(minutes=10) + timedelta(seconds=10 * i)
            session.add(TaskSampleRow(job_id=job_id, attempt=0, role="worker", index=0, node="n1", at=at, step=0,
                                      cpu_cores=0.5, memory_mb=256, gpus_held=1.0, gpu_util_pct=None))
            session.add(TaskSampleRow(job_id=job_id, attempt=0, role="worker", index=1, node="n1", at=at, step=0,
                                      cpu_cores=1.5, memory_mb=512, gpus_held=1.0, gpu_util_pct=50.0,
                                      gpu_memory_mb=2048))
    return job_id


def bob(api: Api) -> str:
    with api.ctx.db.session() as session:
        user = create_user(session, "bob", is_admin=False, clock=api.ctx.clock)
        return create_token(session, user, by=user, clock=api.ctx.clock)


def test_the_owner_sees_each_tasks_figures_with_not_measured_as_null(api: Api, measured: int) -> None:
    response = api.user.get(f"/api/v1/jobs/{measured}/metrics", params={"since": "30m"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["step"] == 0 and body["until"].startswith("2026-03-01T12:00:00")
    assert [(t["role"], t["index"], len(t["points"])) for t in body["tasks"]] == [("worker", 0, 60), ("worker", 1, 60)]
    first, second = (t["points"][-1] for t in body["tasks"])
    assert (first["gpuUtilPct"], first["cpuCores"], first["memoryMB"]) == (None, 0.5, 256)
    assert (second["gpuUtilPct"], second["gpuMemoryMB"]) == (50.0, 2048)


def test_an_admin_sees_anyones_job_and_another_user_is_told_it_does_not_exist(api: Api, measured: int) -> None:
    assert api.admin.get(f"/api/v1/jobs/{measured}/metrics").status_code == 200
    other = api.client(bob(api)).get(f"/api/v1/jobs/{measured}/metrics")
    assert other.status_code == 404
    assert api.client().get(f"/api/v1/jobs/{measured}/metrics").status_code == 401


def test_one_task_and_a_window_given_as_times(api: Api, measured: int) -> None:
    window = {"since": "2026-03-01T11:55:00Z", "until": "2026-03-01T11:56:00"}
    response = api.user.get(f"/api/v1/jobs/{measured}/metrics", params={"task": "worker/1", **window})
    assert response.status_code == 200, response.text
    [task] = response.json()["tasks"]
    assert (task["role"], task["index"], len(task["points"])) == ("worker", 1, 7)  # 11:55:00 .. 11:56:00


def test_a_window_older_than_the_raw_samples_says_it_is_served_coarser(api: Api, measured: int) -> None:
    body = api.user.get(f"/api/v1/jobs/{measured}/metrics", params={"since": "3h"}).json()
    assert body["step"] == 60
    # Nothing was averaged yet (no controller ran): the raw samples still fill the window.
    assert [len(t["points"]) for t in body["tasks"]] == [60, 60]


@pytest.mark.parametrize(("params", "field"), [
    ({"since": "yesterday"}, "since"),
    ({"until": "2026-13-01"}, "until"),
    ({"since": "2026-03-01T13:00:00Z"}, "since"),  # after until
    ({"since": "400d"}, "since"),  # longer than any history
    ({"task": "worker/7"}, "task"),
    ({"task": "chief/0"}, "task"),
])
def test_a_bad_window_or_task_is_a_422_naming_the_field(api: Api, measured: int, params: dict[str, str],
                                                        field: str) -> None:
    response = api.user.get(f"/api/v1/jobs/{measured}/metrics", params=params)
    assert response.status_code == 422, response.text
    assert [e["path"] for e in response.json()["errors"]] == [field]


def test_a_nodes_figures_are_everyones_to_see_and_an_unknown_node_is_404(api: Api) -> None:
    api.ctx.clock = FakeClock(NOW)
    [node] = api.admin.get("/api/v1/nodes").json()
    gpu = {"index": 0, "model": "V100", "memory_total_mb": 16384, "util_pct": None, "memory_used_mb": None,
           "temperature_c": None, "power_w": None, "ecc_errors": None, "simulated": True, "healthy": True}
    with api.ctx.db.session() as session:
        session.add(NodeSampleRow(node=node["name"], at=NOW - timedelta(minutes=1), step=0, cpu_pct=25.0,
                                  memory_used_mb=1000, memory_total_mb=16384, disk_used_pct=40.0, gpus=[gpu]))
    for client in (api.user, api.admin):
        response = client.get(f"/api/v1/nodes/{node['name']}/metrics", params={"since": "5m"})
        assert response.status_code == 200, response.text
        [point] = response.json()["points"]
        assert (point["cpuPct"], point["diskUsedPct"]) == (25.0, 40.0)
        assert point["gpus"][0]["utilPct"] is None and point["gpus"][0]["simulated"] is True
    assert api.user.get("/api/v1/nodes/nowhere/metrics").status_code == 404
    bad = api.user.get(f"/api/v1/nodes/{node['name']}/metrics", params={"until": "soon"})
    assert bad.status_code == 422 and bad.json()["errors"][0]["path"] == "until"


def test_the_sdk_reads_a_jobs_and_a_nodes_history(api: Api, measured: int) -> None:
    with api.sdk(api.user_token) as sdk:
        metrics = sdk.job_metrics(measured, since=timedelta(minutes=5), task="worker/0")
        assert [len(t.points) for t in metrics.tasks] == [30]  # 11:55:00 .. 11:59:50
        assert metrics.tasks[0].points[0].gpuUtilPct is None
        window = sdk.job_metrics(measured, since=NOW - timedelta(minutes=1), until=NOW - timedelta(seconds=30))
        assert [len(t.points) for t in window.tasks] == [4, 4]
        node = sdk.nodes()[0].name
        assert sdk.node_metrics(node, since="1h").points == []
