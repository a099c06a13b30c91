"""Alerts end to end in process: rules judged by the controller's evaluator over rows in a
real store (SQLite and PostgreSQL), on a fake clock; thresholds changed through the real
API; notices delivered to real receivers (an HTTP server, an SMTP server); an admin's
stop that tells the job's owner why; the Prometheus rules file checked by promtool."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from deadlines import scaled
from fastapi.testclient import TestClient
from sqlalchemy import select

from trainyard.api.app import create_app
from trainyard.backends.local.backend import LocalBackend
from trainyard.backends.local.gpus import simulated_gpus
from trainyard.controller.alerting import AlertEvaluator, Receivers
from trainyard.core.clock import FakeClock
from trainyard.monitor.alerts import rule_defaults
from trainyard.monitor.notify import SmtpSettings
from trainyard.schemas.alerts import AlertRuleUpdate
from trainyard.services.alerts import set_rule
from trainyard.services.auth import bootstrap_admin, create_token, create_user
from trainyard.spec.loading import parse_job
from trainyard.spec.templating import normalized_spec
from trainyard.store.queries import alerts as alert_queries
from trainyard.store.queries import metrics as metric_queries
from trainyard.store.rows import AttemptRow, JobRow, NodeRow, NodeSampleRow, TaskRow, TaskSampleRow
from trainyard.web.context import AppContext

SPEC = normalized_spec(parse_job(
    "name: train\ntaskRoles:\n  main:\n    resourcePerInstance: {gpu: 1}\n    commands: ['python train.py']\n"
))


@dataclass
class World:
    db: Any
    clock: FakeClock
    evaluator: AlertEvaluator
    admin: TestClient
    alice: TestClient
    alice_id: int

    def run(self) -> dict[tuple[str, str], str]:
        """One evaluation; the firing alerts as {(rule, subject): message}."""
        self.evaluator.run()
        with self.db.session() as session:
            return {(a.rule, a.subject): a.message for a in alert_queries.firing_alerts(session)}

    def node(self, name: str = "n1", gpus: int = 2) -> None:
        with self.db.session() as session:
            session.add(NodeRow(name=name, backend="local", address="127.0.0.1", cpu_milli=8000, memory_mb=16384,
                                gpus=[{"index": i, "model": "A100", "memory_mb": 40960} for i in range(gpus)],
                                schedulable=True, cordoned=False, labels={}, updated_at=self.clock.now()))

    def node_sample(self, name: str = "n1", *, disk: float = 10.0, gpus: list[dict[str, Any]] | None = None) -> None:
        gpus = gpus if gpus is not None else [{"index": i, "model": "A100", "memory_total_mb": 40960,
                                               "healthy": True, "ecc_errors": 0} for i in range(2)]
        with self.db.session() as session:
            metric_queries.add_samples(  # as a monitoring round writes it: history, and the newest figures
                session, [NodeSampleRow(node=name, at=self.clock.now(), step=0, disk_used_pct=disk, gpus=gpus)], [])

    def running_job(self, *, gpus: int = 1, user_id: int | None = None) -> int:
        now = self.clock.now()
        with self.db.session() as session:
            job = JobRow(name="train", user_id=user_id or self.alice_id, vc="default", priority="normal",
                         state="RUNNING", spec=SPEC, submitted_at=now, started_at=now, attempt=0)
            job.attempts.append(AttemptRow(number=0, state="RUNNING", started_at=now))
            job.attempts[0].tasks.append(TaskRow(job_id=0, role="main", index=0, state="RUNNING", node="n1",
                                                 gpus=[[i, 1000] for i in range(gpus)], cpu_milli=1000,
                                                 memory_mb=1024, ports={}, started_at=now))
            session.add(job)
            session.flush()
            job.attempts[0].tasks[0].job_id = job.id
            return job.id

    def waiting_job(self, pending: str) -> int:
        with self.db.session() as session:
            job = JobRow(name="wait", user_id=self.alice_id, vc="default", priority="normal", state="WAITING",
                         spec=SPEC, submitted_at=self.clock.now(), attempt=0, pending_reason="QUOTA",
                         pending_message=pending)
            session.add(job)
            session.flush()
            return job.id

    def task_sample(self, job_id: int, util: float | None, gpus: float = 1.0) -> None:
        with self.db.session() as session:
            session.add(TaskSampleRow(job_id=job_id, attempt=0, role="main", index=0, node="n1",
                                      at=self.clock.now(), step=0, gpus_held=gpus, gpu_util_pct=util))


def make_world(db, tmp_path, receivers: Receivers | None = None, monitor_interval: float = 10.0) -> World:
    clock = FakeClock()
    backend = LocalBackend(tmp_path / "local", gpus=simulated_gpus(2), cpu_milli=8000, memory_mb=16384)
    with db.session() as session:
        admin_token = bootstrap_admin(session, clock=clock)
        alice = create_user(session, "alice", is_admin=False, clock=clock)
        alice_token = create_token(session, alice, by=alice, clock=clock)
        alice_id = alice.id
    app = create_app(AppContext(db=db, backend=backend, clock=clock, monitor_interval_seconds=monitor_interval))

    def client(token: str | None) -> TestClient:
        return TestClient(app, headers={"Authorization": f"Bearer {token}"}, raise_server_exceptions=False)

    evaluator = AlertEvaluator(db, clock, 30.0, receivers or Receivers(), monitor_interval_seconds=monitor_interval)
    return World(db, clock, evaluator, client(admin_token), client(alice_token), alice_id)


@pytest.fixture
def world(db, tmp_path) -> World:
    return make_world(db, tmp_path)


def test_a_job_running_longer_than_the_limit_fires_and_resolves_when_it_ends(world: World) -> None:
    job = world.running_job()
    world.clock.advance(5 * 86400 - 60)
    assert world.run() == {}
    world.clock.advance(120)
    assert "has run for 5d 0h01m, longer than 5 days" in world.run()[("long-running-job", f"job:{job}")]
    with world.db.session() as session:
        session.get(JobRow, job).state = "SUCCEEDED"
    assert world.run() == {}
    listed = world.admin.get("/api/v1/alerts", params={"all": "true"}).json()
    assert [(a["rule"], a["state"], a["endedAt"] is not None) for a in listed] == [
        ("long-running-job", "resolved", True)]
    assert world.admin.get("/api/v1/alerts").json() == []  # firing ones only, by default


def test_idle_gpus_fire_after_the_window_never_on_na_utilisation_and_resolve_when_used(world: World) -> None:
    idle, simulated = world.running_job(), world.running_job()
    for _ in range(4):
        world.task_sample(idle, 3.0)
        world.task_sample(simulated, None)  # a simulated GPU: n/a, never low
        world.clock.advance(600)
    found = world.run()
    assert list(found) == [("idle-gpu-job", f"job:{idle}")]
    assert "used 3.0 % of them on average over the last 30 minutes" in found[("idle-gpu-job", f"job:{idle}")]
    for _ in range(4):
        world.task_sample(idle, 90.0)
        world.clock.advance(600)
    assert world.run() == {}


def test_a_young_job_is_not_judged_idle_on_part_of_the_window(world: World) -> None:
    job = world.running_job()
    world.clock.advance(600)
    world.task_sample(job, 0.0)
    assert world.run() == {}


def test_a_long_wait_fires_with_its_pending_reason(world: World) -> None:
    job = world.waiting_job("waits for 2 GPUs of VC default's quota")
    world.clock.advance(29 * 60)
    assert world.run() == {}
    world.clock.advance(2 * 60)
    message = world.run()[("long-waiting-job", f"job:{job}")]
    assert message == f"job {job} has waited 0h31m: waits for 2 GPUs of VC default's quota"


def test_node_rules_disk_ecc_missing_gpu_and_silence_fire_and_resolve(world: World) -> None:
    world.node("n1")
    world.node("never-sampled")  # no sampler for it: not judged stale
    world.node_sample(disk=85.0)
    assert world.run() == {("disk-full", "node:n1"): "node n1: disk 85.0 % full (over 80 %)"}
    world.node_sample(gpus=[{"index": 0, "model": "A100", "healthy": True, "ecc_errors": 2}])
    found = world.run()
    assert found == {("node-unhealthy", "node:n1"):
                     "node n1: GPU 1 missing; GPU 0 has 2 uncorrected ECC error(s)"}
    world.node_sample()
    assert world.run() == {}
    world.clock.advance(301)
    assert world.run() == {("node-unhealthy", "node:n1"): "node n1: not sampled for over 300 s"}
    world.clock.advance(2 * 86400)  # its last sample is now older than anything the rule looks at
    assert world.run() == {("node-unhealthy", "node:n1"): "node n1: not sampled for over 300 s"}
    world.node_sample()
    assert world.run() == {}


def test_a_node_is_stale_after_five_monitoring_intervals_and_never_before_300_s(db, tmp_path) -> None:
    world = make_world(db, tmp_path, monitor_interval=120.0)  # sampled every 2 minutes: stale after 10
    world.node("n1")
    world.node_sample()
    [rule] = [r for r in world.admin.get("/api/v1/alerts/rules").json() if r["name"] == "node-unhealthy"]
    assert rule["params"]["stale_seconds"] == rule["defaults"]["stale_seconds"] == 600
    world.clock.advance(599)
    assert world.run() == {}  # four rounds late is not yet a sick node
    world.clock.advance(2)
    assert world.run() == {("node-unhealthy", "node:n1"): "node n1: not sampled for over 600 s"}
    # An admin's own setting wins over the interval's default.
    world.admin.put("/api/v1/alerts/rules/node-unhealthy", json={"params": {"stale_seconds": 900}})
    assert world.run() == {}
    # A short interval keeps the floor of 300 s.
    assert [rule_defaults("node-unhealthy", every)["stale_seconds"] for every in (1, 10, 60, 61)] == [300] * 3 + [305]


def test_thresholds_changed_through_the_api_take_effect_at_the_next_evaluation(world: World) -> None:
    world.node("n1")
    world.node_sample(disk=70.0)
    assert world.run() == {}
    changed = world.admin.put("/api/v1/alerts/rules/disk-full", json={"params": {"used_pct": 60}})
    assert changed.status_code == 200 and changed.json()["params"] == {"used_pct": 60.0}
    assert world.run() == {("disk-full", "node:n1"): "node n1: disk 70.0 % full (over 60 %)"}
    assert world.admin.put("/api/v1/alerts/rules/disk-full", json={"enabled": False}).status_code == 200
    assert world.run() == {}
    bad = world.admin.put("/api/v1/alerts/rules/disk-full", json={"params": {"used_percent": 60}})
    assert bad.status_code == 422 and bad.json()["errors"][0]["path"] == "params.used_percent"
    negative = world.admin.put("/api/v1/alerts/rules/disk-full", json={"params": {"used_pct": -1}})
    assert negative.status_code == 422 and "params.used_pct" in negative.json()["detail"]
    not_node = world.admin.put("/api/v1/alerts/rules/disk-full", json={"cordon": True})
    assert not_node.status_code == 422 and not_node.json()["errors"][0]["path"] == "cordon"
    assert world.admin.put("/api/v1/alerts/rules/nope", json={}).status_code == 404
    assert world.admin.put("/api/v1/alerts/rules/disk-full", json={"enabled": "no"}).status_code == 422


def test_an_unhealthy_node_is_cordoned_only_when_an_admin_enabled_it(world: World) -> None:
    world.node("n1")
    world.node_sample(gpus=[{"index": 0, "model": "A100", "healthy": False}, {"index": 1, "model": "A100"}])
    world.run()
    with world.db.session() as session:
        assert session.get(NodeRow, "n1").cordoned is False
    assert world.admin.put("/api/v1/alerts/rules/node-unhealthy", json={"cordon": True}).json()["cordon"] is True
    world.node_sample()
    assert world.run() == {}  # healthy again: resolved
    world.node_sample(gpus=[{"index": 0, "model": "A100", "healthy": False}, {"index": 1, "model": "A100"}])
    found = world.run()
    assert found == {("node-unhealthy", "node:n1"): "node n1: GPU 0 not answering (cordoned automatically)"}
    with world.db.session() as session:
        assert session.get(NodeRow, "n1").cordoned is True
    world.admin.post("/api/v1/nodes/n1/uncordon")  # the admin's word is final while it fires
    world.node_sample(gpus=[{"index": 0, "model": "A100", "healthy": False}, {"index": 1, "model": "A100"}])
    assert world.run() == found
    with world.db.session() as session:
        assert session.get(NodeRow, "n1").cordoned is False


def test_users_see_alerts_about_their_own_jobs_and_only_admins_tune_rules(world: World) -> None:
    with world.db.session() as session:
        bob = create_user(session, "bob", is_admin=False, clock=world.clock)
        bob_id = bob.id
    mine, theirs = world.running_job(), world.running_job(user_id=bob_id)
    world.clock.advance(6 * 86400)
    world.run()
    assert [a["jobId"] for a in world.alice.get("/api/v1/alerts").json()] == [mine]
    assert sorted(a["jobId"] for a in world.admin.get("/api/v1/alerts").json()) == sorted([mine, theirs])
    for method, path, body in (("GET", "/api/v1/alerts/rules", None), ("GET", "/api/v1/alerts/rules.yml", None),
                               ("PUT", "/api/v1/alerts/rules/disk-full", {"enabled": False}),
                               ("POST", "/api/v1/alerts/1/stop", None)):
        assert world.alice.request(method, path, json=body).status_code == 403
    assert TestClient(world.admin.app, raise_server_exceptions=False).get("/api/v1/alerts").status_code == 401


def test_an_admin_stops_an_idle_job_in_one_action_and_its_owner_is_told_why(world: World) -> None:
    job = world.running_job()
    for _ in range(4):
        world.task_sample(job, 1.0)
        world.clock.advance(600)
    world.run()
    alert = world.admin.get("/api/v1/alerts").json()[0]
    stopped = world.admin.post(f"/api/v1/alerts/{alert['id']}/stop")
    assert stopped.status_code == 200, stopped.text
    seen_by_owner = world.alice.get(f"/api/v1/jobs/{job}").json()
    why = f"idle-gpu-job: {alert['message']}"
    assert seen_by_owner["state"] == "STOPPING"
    assert seen_by_owner["message"] == f"stopping on request of admin: {why}"
    assert any(e["message"] == f"stop requested by admin: {why}" for e in seen_by_owner["events"])
    assert world.admin.post(f"/api/v1/alerts/{alert['id']}/stop").status_code == 200  # already stopping
    assert world.admin.post("/api/v1/alerts/999/stop").status_code == 404


# Real receivers: an HTTP server and an SMTP server in the test process.

class Receiver(BaseHTTPRequestHandler):
    received: list[dict[str, Any]] = []
    fail = False

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if type(self).fail:
            self.send_response(503)
        else:
            type(self).received.append(json.loads(body))
            self.send_response(200)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def webhook() -> Iterator[tuple[str, type[Receiver]]]:
    handler = type("Handler", (Receiver,), {"received": [], "fail": False})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", handler
    server.shutdown()
    server.server_close()


@pytest.fixture
def smtp() -> Iterator[tuple[int, list[Any]]]:
    aiosmtpd = pytest.importorskip("aiosmtpd.controller", reason="aiosmtpd is in the test extra")

    class Inbox:
        messages: list[Any] = []

        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
            self.messages.append(envelope)
            return "250 OK"

    class OnHeldSocket(aiosmtpd.Controller):
        """aiosmtpd's server on a socket bound to port 0 before it starts (its start-up probe
        cannot follow port 0 itself): the kernel's port, held from the first moment."""

        def __init__(self, handler: Any, sock: socket.socket) -> None:
            super().__init__(handler, hostname="127.0.0.1", port=sock.getsockname()[1])
            self.sock = sock

        def _create_server(self) -> Any:
            return self.loop.create_server(self._factory_invoker, sock=self.sock, ssl=self.ssl_context)

    inbox = Inbox()
    inbox.messages = []
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    controller = OnHeldSocket(inbox, held)
    controller.start()
    yield controller.port, inbox.messages
    controller.stop()


def test_firing_and_resolved_reach_a_webhook_and_a_mailbox_once_and_failures_are_retried(
    db, tmp_path, webhook, smtp
) -> None:
    url, hook = webhook
    port, mails = smtp
    receivers = Receivers([url], SmtpSettings("127.0.0.1", port, "yard@example.org", ["ops@example.org"]))
    world = make_world(db, tmp_path, receivers)
    world.node("n1")
    hook.fail = True
    world.node_sample(disk=95.0)
    world.run()
    assert hook.received == [] and len(mails) == 1  # the webhook failed; e-mail went
    hook.fail = False
    world.run()  # retried: heard now
    world.run()  # nothing new: nothing sent
    assert len(hook.received) == 1 and len(mails) == 1
    payload = hook.received[0]
    assert (payload["version"], payload["status"]) == ("4", "firing")
    (alert,) = payload["alerts"]
    assert alert["labels"] == {"alertname": "disk-full", "severity": "warning", "node": "n1"}
    assert alert["endsAt"] == "0001-01-01T00:00:00Z" and alert["startsAt"].startswith("2026-01-01T00:00:00")
    assert alert["annotations"]["description"] == "node n1: disk 95.0 % full (over 80 %)"
    mail = mails[0]
    assert mail.mail_from == "yard@example.org" and mail.rcpt_tos == ["ops@example.org"]
    assert b"[FIRING]" in mail.content and b"disk 95.0 % full" in mail.content
    world.node_sample(disk=50.0)
    world.clock.advance(60)
    world.run()
    world.run()
    assert [p["status"] for p in hook.received] == ["firing", "resolved"] and len(mails) == 2
    assert hook.received[1]["alerts"][0]["endsAt"].startswith("2026-01-01T00:01:00")
    assert hook.received[1]["alerts"][0]["fingerprint"] == alert["fingerprint"]  # one alert, firing then resolved
    assert b"[RESOLVED]" in mails[1].content


def test_a_firing_alert_about_another_problem_now_is_stored_and_told_again_moving_figures_are_not(
    db, tmp_path, webhook
) -> None:
    url, hook = webhook
    world = make_world(db, tmp_path, Receivers([url]))
    world.node("n1")
    ecc = [{"index": 0, "model": "A100", "healthy": True, "ecc_errors": 2}, {"index": 1, "model": "A100"}]
    world.node_sample(gpus=ecc)
    world.run()
    ecc[0]["ecc_errors"] = 5  # the count moves: the same problem, nothing new to tell
    world.node_sample(gpus=ecc)
    assert world.run() == {("node-unhealthy", "node:n1"): "node n1: GPU 0 has 5 uncorrected ECC error(s)"}
    assert [a["annotations"]["description"] for p in hook.received for a in p["alerts"]] == [
        "node n1: GPU 0 has 2 uncorrected ECC error(s)"]
    world.node_sample(gpus=[ecc[0], {"index": 1, "model": "A100", "healthy": False}])  # another problem
    found = world.run()
    assert found == {("node-unhealthy", "node:n1"):
                     "node n1: GPU 0 has 5 uncorrected ECC error(s); GPU 1 not answering"}
    world.run()  # told once
    told = [a for p in hook.received for a in p["alerts"]]
    assert [(a["status"], a["annotations"]["description"]) for a in told] == [
        ("firing", "node n1: GPU 0 has 2 uncorrected ECC error(s)"),
        ("firing", "node n1: GPU 0 has 5 uncorrected ECC error(s); GPU 1 not answering")]
    assert told[0]["fingerprint"] == told[1]["fingerprint"] and told[0]["startsAt"] == told[1]["startsAt"]
    [stored] = world.admin.get("/api/v1/alerts").json()  # one alert, showing its new text
    assert stored["message"] == found[("node-unhealthy", "node:n1")]


def test_the_prometheus_rules_file_passes_promtool_with_the_current_thresholds(world: World, tmp_path) -> None:
    world.admin.put("/api/v1/alerts/rules/long-running-job", json={"params": {"days": 7}})
    world.admin.put("/api/v1/alerts/rules/long-waiting-job", json={"enabled": False})
    response = world.admin.get("/api/v1/alerts/rules.yml")
    assert response.status_code == 200
    text = response.text
    assert "trainyard_job_running_seconds > 604800" in text and "trainyard_queue_oldest_wait_seconds" not in text
    assert "avg_over_time(trainyard_task_gpu_utilization_ratio[30m])) < 0.1" in text
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("TRAINYARD_REQUIRE_PROMETHEUS") == "1" or os.environ.get("CI"):
            pytest.fail("promtool missing, and this run requires it: .ci/run installs Debian's prometheus package")
        pytest.skip("promtool not installed (apt-get install -y prometheus); CI runs this check")
    path = tmp_path / "trainyard.rules.yml"
    path.write_text(text)
    checked = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 6 rules found" in checked.stdout


def test_the_controller_evaluates_on_its_timer_and_a_broken_receiver_never_stops_its_cycle(db, make_world) -> None:
    clock = FakeClock()
    unreachable = Receivers(["http://127.0.0.1:9/nobody-listens"])
    controller = make_world(gpus=2, clock=clock, users=(), inventory=False, alert_interval_seconds=30.0,
                            alert_receivers=unreachable).controller
    with db.session() as session:  # any disk in use is "full": the real sampler's figure will do
        set_rule(session, "disk-full", AlertRuleUpdate(params={"used_pct": 0.001}), clock, 10.0)
    controller.run_once()  # inventory, a first sampling round and a first evaluation, each in its thread
    assert controller.monitoring is not None
    controller.monitoring.join(scaled(10))
    controller.alerts.join(scaled(10))
    clock.advance(10)
    controller.run_once()  # not due yet
    assert controller.alerts.start_if_due() is False
    clock.advance(25)
    controller.run_once()  # due: fires; the webhook fails, logged, and the cycle goes on
    controller.alerts.join(scaled(10))
    with db.session() as session:
        node = session.scalars(select(NodeRow)).one().name
        firing = {a.subject: a for a in alert_queries.firing_alerts(session) if a.rule == "disk-full"}
    assert firing[f"node:{node}"].notified == {}  # not heard: asked again at the next evaluation
    assert controller.cycles == 3


def test_a_new_idle_window_is_read_at_the_next_evaluation_not_from_the_last_reading(world: World) -> None:
    job = world.running_job()
    for _ in range(35):  # idle for 35 minutes, sampled every minute
        world.task_sample(job, 1.0)
        world.clock.advance(60)
    world.task_sample(job, 95.0)  # then busy: a mean of 19.8 % over the last 5 minutes
    world.clock.advance(1)
    assert list(world.run()) == [("idle-gpu-job", f"job:{job}")]
    changed = world.admin.put("/api/v1/alerts/rules/idle-gpu-job", json={"params": {"window_minutes": 5}})
    assert changed.status_code == 200
    world.clock.advance(1)
    assert world.run() == {}  # over the last 5 minutes it is busy
