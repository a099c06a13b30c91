"""GET /nodes and GET /top: each node's, GPU's and running job's newest fresh sample beside
what is allocated, who may see which job, and samples too old to describe now."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from api.harness import Api
from api.live_harness import gpu, live_api, node_sample, running_job, store_round, task_sample

from trainyard.controller.loop import Controller
from trainyard.core.clock import FakeClock
from trainyard.services.live import FRESH_INTERVALS

INTERVAL = 10.0  # the harness's monitor_interval_seconds (the setting's default)


@pytest.fixture
def live(db, tmp_path) -> Iterator[tuple[Api, Controller, FakeClock]]:
    clock = FakeClock(datetime.now(UTC))
    with live_api(db, tmp_path, clock) as (api, controller):
        yield api, controller, clock


def _node(api: Api) -> str:
    name: str = api.admin.get("/api/v1/nodes").json()[0]["name"]
    return name


def test_nodes_show_each_gpu_s_measured_use_beside_its_allocation(live) -> None:
    api, controller, clock = live
    job = running_job(api, controller, api.user_token, "train", gpus=2)
    node = _node(api)
    clock.advance(1)  # after the controller's own first round of (real) samples
    store_round(api, nodes=(node_sample(node, clock.now(), (gpu(0, 37.0), gpu(1, 90.0, memory_used=8000),
                                                               gpu(2, 55.0, simulated=True)),
                                         cpu_pct=12.5, memory_used_mb=4096, memory_total_mb=16384,
                                         disk_used_pct=81.0, load1=1.5),))

    [view] = api.user.get("/api/v1/nodes").json()
    assert view["usage"] == {"sampledAt": view["usage"]["sampledAt"], "cpuPct": 12.5, "load1": 1.5,
                             "memoryUsedMB": 4096, "memoryTotalMB": 16384, "diskUsedPct": 81.0}
    gpus = {g["index"]: g for g in view["gpus"]}
    held = [i for i, g in gpus.items() if g["used"] == 1.0]
    assert len(held) == 2 and all(gpus[i]["jobs"] == [job] for i in held)
    assert gpus[0]["usage"] == {"utilPct": 37.0, "memoryUsedMB": 1000, "temperatureC": 61.0, "powerW": 180.0,
                                "eccErrors": 0, "healthy": True}
    assert gpus[1]["usage"]["utilPct"] == 90.0 and gpus[1]["usage"]["memoryUsedMB"] == 8000
    assert gpus[2]["usage"]["utilPct"] is None, "a simulated GPU has no utilisation, whatever a sampler sent"
    assert gpus[3]["usage"] is None, "a GPU the sample does not list was not measured"


def test_a_sample_older_than_three_intervals_says_nothing_about_now(live) -> None:
    api, _, clock = live
    node = _node(api)
    store_round(api, nodes=(node_sample(node, clock.now(), (gpu(0, 50.0),), cpu_pct=40.0),))
    clock.advance(FRESH_INTERVALS * INTERVAL - 1)
    [view] = api.user.get("/api/v1/nodes").json()
    assert view["usage"]["cpuPct"] == 40.0 and view["gpus"][0]["usage"]["utilPct"] == 50.0

    clock.advance(2)
    [view] = api.user.get("/api/v1/nodes").json()
    assert view["usage"] is None and all(g["usage"] is None for g in view["gpus"])
    assert api.user.get("/api/v1/top").json()["freshSeconds"] == FRESH_INTERVALS * INTERVAL

    store_round(api, nodes=(node_sample(node, clock.now(), (gpu(0, 5.0),), cpu_pct=3.0),))
    [view] = api.user.get("/api/v1/nodes").json()
    assert view["usage"]["cpuPct"] == 3.0 and view["gpus"][0]["usage"]["utilPct"] == 5.0, "the newest one wins"


@pytest.mark.postgres
def test_top_sums_a_job_s_tasks_and_shows_a_user_only_their_own_jobs(live) -> None:
    api, controller, clock = live
    mine = running_job(api, controller, api.user_token, "mine", instances=2, gpus=1)
    theirs = running_job(api, controller, api.admin_token, "theirs", gpus=2)
    node = _node(api)
    clock.advance(1)  # after the controller's own first round of (real) samples
    before = clock.now()
    store_round(api, tasks=(task_sample(theirs, 0, node, before, gpu_util_pct=99.0, gpus_held=2.0),))
    clock.advance(5)
    store_round(api, tasks=(
        task_sample(mine, 0, node, clock.now(), cpu_cores=1.5, memory_mb=1000, gpus_held=1.0, gpu_util_pct=80.0,
                    gpu_memory_mb=3000),
        task_sample(mine, 1, node, clock.now(), cpu_cores=0.5, memory_mb=500, gpus_held=1.0, gpu_util_pct=20.0,
                    gpu_memory_mb=1000),
        task_sample(theirs, 0, node, clock.now(), cpu_cores=2.0, memory_mb=64, gpus_held=2.0, gpu_util_pct=10.0,
                    gpu_memory_mb=9000),
    ))

    as_user = api.user.get("/api/v1/top").json()
    assert [j["id"] for j in as_user["jobs"]] == [mine]
    [job] = as_user["jobs"]
    assert job == {**job, "name": "mine", "user": "alice", "state": "RUNNING", "gpus": 2.0, "tasks": 2,
                   "tasksSampled": 2, "gpuUtilPct": 50.0, "gpuMemoryMB": 4000, "cpuCores": 2.0, "memoryMB": 1500}
    assert job["runtimeSeconds"] == pytest.approx(6.0, abs=1.0)
    named = {j for n in as_user["nodes"] for g in n["gpus"] for j in g["jobs"]}
    assert named == {mine}, "a user sees every GPU's use but only their own jobs named"
    assert sum(g["used"] for n in as_user["nodes"] for g in n["gpus"]) == 4.0

    as_admin = api.admin.get("/api/v1/top").json()
    assert [j["id"] for j in as_admin["jobs"]] == [mine, theirs], "busiest GPUs first"
    assert as_admin["jobs"][1]["gpuUtilPct"] == 10.0, "the newest sample, not the first"


def test_a_running_job_without_fresh_samples_is_listed_with_nothing_measured_last(live) -> None:
    api, controller, clock = live
    quiet = running_job(api, controller, api.user_token, "quiet", gpus=2)
    busy = running_job(api, controller, api.user_token, "busy", gpus=1)
    node = _node(api)
    clock.advance(1)  # after the controller's own first round of (real) samples
    store_round(api, tasks=(task_sample(quiet, 0, node, clock.now(), gpu_util_pct=70.0, gpus_held=2.0),
                            task_sample(busy, 0, node, clock.now(), gpu_util_pct=None, gpus_held=1.0, cpu_cores=1.0)))
    jobs = api.user.get("/api/v1/top").json()["jobs"]
    assert [(j["id"], j["gpuUtilPct"], j["tasksSampled"]) for j in jobs] == [(quiet, 70.0, 1), (busy, None, 1)]
    assert jobs[1]["cpuCores"] == 1.0 and jobs[1]["gpuMemoryMB"] is None

    clock.advance(FRESH_INTERVALS * INTERVAL + 1)
    jobs = api.user.get("/api/v1/top").json()["jobs"]
    assert [(j["id"], j["gpuUtilPct"], j["tasksSampled"], j["sampledAt"]) for j in jobs] == [
        (quiet, None, 0, None), (busy, None, 0, None)], "no fresh sample: by GPUs held"


def test_the_live_view_needs_a_token(live) -> None:
    api, _, _ = live
    for path in ("/api/v1/top", "/api/v1/nodes"):
        response = api.client().get(path)
        assert response.status_code == 401 and "bearer token" in response.json()["detail"]


def test_the_sdk_reads_top_as_typed_models(live) -> None:
    api, controller, clock = live
    job = running_job(api, controller, api.user_token, "typed")
    clock.advance(1)  # after the controller's own first round of (real) samples
    store_round(api, tasks=(task_sample(job, 0, _node(api), clock.now(), gpu_util_pct=42.0, gpus_held=1.0),))
    with api.sdk(api.user_token) as sdk:
        top = sdk.top()
    assert top.jobs[0].id == job and top.jobs[0].gpuUtilPct == 42.0 and top.nodes[0].gpus[0].memoryMB == 16384
