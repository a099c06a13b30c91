"""``GET /metrics`` on a real store (SQLite and PostgreSQL), with the real controller placing
and launching jobs on the real local backend, and time from a FakeClock: the page shows what
the store holds, read back with ``prometheus_client``'s own parser."""

from __future__ import annotations

import pytest
from api.harness import make_api
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from worlds import World

from trainyard.api.app import create_app
from trainyard.core.clock import FakeClock
from trainyard.core.metrics import GpuSample, NodeSample, Sampled, TaskSample
from trainyard.monitor import history
from trainyard.services import admin as admin_service
from trainyard.services import auth
from trainyard.services import jobs as job_service
from trainyard.store.rows import NodeRow
from trainyard.web.context import AppContext

MIB = 1024 * 1024
Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def series(page: str) -> Series:
    """Every sample on the page, by name and labels, as Prometheus' own client reads it."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(page)
        for sample in family.samples
    }


def at(found: Series, name: str, **labels: str | int) -> float | None:
    return found.get((name, frozenset((k, str(v)) for k, v in labels.items())))


class MetricsWorld(World):
    """The world with its API context, scraped as the admin; ``node`` and ``model``: its one
    node's name and GPU model."""

    ctx: AppContext
    admin_token: str
    node: str
    model: str

    def scrape(self) -> Series:
        response = TestClient(create_app(self.ctx), headers={"Authorization": f"Bearer {self.admin_token}"}).get(
            "/metrics")
        assert response.status_code == 200, response.text
        return series(response.text)


@pytest.fixture
def world(make_world) -> MetricsWorld:
    # The test records the samples the page must show; the controller's own sampling rounds
    # (tested in tests/controller) would add theirs, taken whenever their thread reads the clock.
    world = make_world(kind=MetricsWorld, clock=FakeClock(), users=(), monitoring=False)
    with world.db.session() as session:
        token = auth.bootstrap_admin(session, clock=world.clock)
        assert token is not None
        world.users["alice"] = auth.create_user(session, "alice", is_admin=False, clock=world.clock)
        # research never borrows: a job over its quota waits in its queue (the page shows queues).
        admin_service.create_vc(session, "research", gpus=2, model=None, preemption=True, clock=world.clock,
                                borrow_limit=0)
        admin_service.grant_vc(session, "research", "alice")
        [node] = job_service.list_nodes(session)
        world.node, world.model = node.name, node.gpus[0]["model"]
    world.admin_token = token
    world.ctx = AppContext(db=world.db, backend=world.backend, clock=world.clock, controller=world.controller,
                           specs=world.controller.specs, monitor_interval_seconds=10)
    return world


HOLDS_TWO = """
name: holds-two
defaults: {virtualCluster: research}
taskRoles:
  main:
    resourcePerInstance: {gpu: 2, cpu: 0.5, memoryMB: 128}
    commands: ['sleep 600']
"""
TWO_MORE = """
name: two-more
defaults: {virtualCluster: research}
taskRoles:
  main:
    resourcePerInstance: {gpu: 2, cpu: 0.5, memoryMB: 128}
    commands: ['true']
"""


@pytest.mark.postgres
def test_the_page_shows_gpus_vcs_queues_jobs_and_the_newest_samples(world: MetricsWorld) -> None:
    running = world.submit(HOLDS_TWO)
    world.clock.advance(5)
    world.drive(running, ("RUNNING",))
    waiting = world.submit(TWO_MORE)  # research's quota is in use and it may not borrow: it waits
    world.drive(waiting, ("WAITING",))
    world.clock.advance(60)
    now = world.clock.now()
    with world.ctx.db.session() as session:
        history.record(session, Sampled(
            nodes=(NodeSample(
                node=world.node, at=now, cpu_pct=25.0, memory_used_mb=1024, disk_used_pct=50.0,
                gpus=(GpuSample(0, world.model, 16384, memory_used_mb=100, simulated=True),
                      GpuSample(1, "H100", 81920, util_pct=80.0, memory_used_mb=2048, temperature_c=61.0,
                                power_w=250.0, ecc_errors=0)),
            ),),
            tasks=(TaskSample(job_id=running, attempt=0, role="main", index=0, node=world.node, at=now,
                              cpu_cores=1.5, memory_mb=512, gpus_held=2.0, gpu_util_pct=None, gpu_memory_mb=100),),
        ))

    found = world.scrape()
    node = {"node": world.node}
    assert at(found, "trainyard_gpus_total", **node, model=world.model) == 4
    assert at(found, "trainyard_gpus_allocated", **node, model=world.model) == 2
    # A simulated GPU has no utilisation: absent, not 0; a measured one shows its ratio.
    assert at(found, "trainyard_gpu_utilization_ratio", **node, gpu=0, model=world.model) is None
    assert at(found, "trainyard_gpu_utilization_ratio", **node, gpu=1, model="H100") == 0.8
    assert at(found, "trainyard_gpu_memory_used_bytes", **node, gpu=1) == 2048 * MIB
    assert at(found, "trainyard_gpu_temperature_celsius", **node, gpu=1) == 61
    assert at(found, "trainyard_gpu_power_watts", **node, gpu=1) == 250
    assert at(found, "trainyard_gpu_ecc_uncorrected_errors", **node, gpu=1) == 0
    assert at(found, "trainyard_gpu_temperature_celsius", **node, gpu=0) is None
    assert at(found, "trainyard_node_up", **node) == 1
    assert at(found, "trainyard_node_cpu_utilization_ratio", **node) == 0.25
    assert at(found, "trainyard_node_memory_used_bytes", **node) == 1024 * MIB
    assert at(found, "trainyard_node_disk_used_ratio", **node) == 0.5

    # The VC figures are yard vc list's: research guarantees 2 (any model), its job uses 2.
    assert at(found, "trainyard_vc_quota_gpus", vc="research", model="*") == 2
    assert at(found, "trainyard_vc_used_gpus", vc="research") == 2
    assert at(found, "trainyard_vc_borrowed_gpus", vc="research") == 0
    assert at(found, "trainyard_queue_length", vc="research") == 1
    assert at(found, "trainyard_queue_length", vc="default") == 0
    assert at(found, "trainyard_queue_oldest_wait_seconds", vc="research") == 60
    assert at(found, "trainyard_queue_oldest_wait_seconds", vc="default") == 0

    assert at(found, "trainyard_jobs", state="RUNNING") == 1
    assert at(found, "trainyard_jobs", state="WAITING") == 1
    assert at(found, "trainyard_jobs", state="SUCCEEDED") == 0
    assert at(found, "trainyard_job_running_seconds", job=running, user="alice", vc="research") == 60

    task = {"job": running, "user": "alice", "vc": "research", "role": "main", "index": 0}
    assert at(found, "trainyard_task_cpu_cores", **task) == 1.5
    assert at(found, "trainyard_task_memory_used_bytes", **task) == 512 * MIB
    assert at(found, "trainyard_task_gpu_memory_used_bytes", **task) == 100 * MIB
    assert at(found, "trainyard_task_gpu_utilization_ratio", **task) is None

    # Observed in the controller's process: cycles were timed, one job first started 5 s
    # after its submission.
    assert (at(found, "trainyard_scheduler_cycle_duration_seconds_count") or 0) >= 1
    assert at(found, "trainyard_job_start_latency_seconds_count") == 1
    assert at(found, "trainyard_job_start_latency_seconds_sum") == 5

    # Three monitoring intervals without a sample: the node is not up, and its figures go.
    world.clock.advance(31)
    stale = world.scrape()
    assert at(stale, "trainyard_node_up", **node) == 0
    assert at(stale, "trainyard_gpu_memory_used_bytes", **node, gpu=1) is None
    assert at(stale, "trainyard_task_cpu_cores", **task) is None
    assert at(stale, "trainyard_gpus_allocated", **node, model=world.model) == 2


def test_a_stopped_job_leaves_the_running_figures_and_its_gpus_are_free_again(world: MetricsWorld) -> None:
    job = world.submit(HOLDS_TWO)
    world.drive(job, ("RUNNING",))
    world.clock.advance(100)
    with world.ctx.db.session() as session:
        admin = auth.get_user(session, "admin")
        job_service.request_stop(session, admin, job, clock=world.clock)
    world.drive(job, ("STOPPED",))
    world.clock.advance(10)
    found = world.scrape()
    assert at(found, "trainyard_jobs", state="STOPPED") == 1
    assert at(found, "trainyard_jobs", state="RUNNING") == 0
    assert at(found, "trainyard_job_running_seconds", job=job, user="alice", vc="research") is None
    assert at(found, "trainyard_gpus_allocated", node=world.node, model=world.model) == 0
    assert at(found, "trainyard_vc_used_gpus", vc="research") == 0


def test_scraping_needs_an_admin_token(db, tmp_path) -> None:
    api = make_api(db, tmp_path / "local")  # no controller in this process: no histograms
    anonymous = api.client().get("/metrics")
    assert anonymous.status_code == 401 and "missing bearer token" in anonymous.json()["detail"]
    assert anonymous.headers["www-authenticate"] == "Bearer"
    assert api.client("not-a-token").get("/metrics").status_code == 401
    refused = api.user.get("/metrics")
    assert refused.status_code == 403 and refused.json()["detail"] == "this needs an admin"
    page = api.admin.get("/metrics")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    found = series(page.text)
    assert at(found, "trainyard_jobs", state="WAITING") == 0
    assert not any(name.startswith("trainyard_scheduler_cycle") for name, _ in found)


def test_a_node_whose_gpus_change_shows_the_new_ones_on_the_next_scrape(world: MetricsWorld) -> None:
    """The nodes' GPU lists are decoded once per stored text (``store/queries/decoded.py``):
    a changed list is a new text, so no scrape shows an old one."""
    node = {"node": world.node}
    assert at(world.scrape(), "trainyard_gpus_total", **node, model=world.model) == 4
    with world.ctx.db.session() as session:
        row = session.get(NodeRow, world.node)
        assert row is not None
        row.gpus = [*row.gpus[:2], *({**gpu, "model": "NVIDIA H100"} for gpu in row.gpus[2:])]
    found = world.scrape()
    assert at(found, "trainyard_gpus_total", **node, model=world.model) == 2
    assert at(found, "trainyard_gpus_total", **node, model="NVIDIA H100") == 2
    assert at(found, "trainyard_gpus_allocated", **node, model="NVIDIA H100") == 0.0
