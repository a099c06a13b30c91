"""A user is told when their job ends, fails or is preempted: notices queued with the event
(per job, or their account's default), sent by the alert tick to a real SMTP server (only
to the owner's own address) and a real HTTP receiver, once per event, retried then failed
with a reason the owner reads; webhooks that could reach the server's own network refused
when given and again after resolving, redirects not followed."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from fastapi.testclient import TestClient

from trainyard.api.app import create_app
from trainyard.api.server import alert_receivers
from trainyard.backends.local.backend import LocalBackend
from trainyard.backends.local.gpus import simulated_gpus
from trainyard.controller.alerting import Receivers
from trainyard.controller.job_notices import MAX_TRIES, JobNotices
from trainyard.core import transitions
from trainyard.core.clock import FakeClock
from trainyard.core.settings import Settings
from trainyard.monitor import webhooks
from trainyard.monitor.notify import SmtpSettings
from trainyard.monitor.webhooks import Refused, check_url, resolve
from trainyard.services.auth import bootstrap_admin, create_token, create_user
from trainyard.services.jobs import SubmitLimits, submit_job
from trainyard.spec.loading import parse_job
from trainyard.spec.templating import normalized_spec
from trainyard.store.events import record_event
from trainyard.store.queries import notices as notice_queries
from trainyard.store.rows import AttemptRow, JobRow, NodeRow
from trainyard.web.context import AppContext

JOB = "name: train\ntaskRoles:\n  main:\n    commands: ['python train.py']\n"


class Hook(BaseHTTPRequestHandler):
    received: list[dict[str, Any]] = []
    answer = 200

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        status = type(self).answer
        if status == 200:
            type(self).received.append({"host": self.headers["Host"], **json.loads(body)})
        self.send_response(status)
        if status == 302:
            self.send_header("Location", "/elsewhere")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[tuple[int, type[Hook]]]:
    handler = type("Handler", (Hook,), {"received": [], "answer": 200})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1], handler
    server.shutdown()
    server.server_close()


@pytest.fixture
def mailbox() -> Iterator[tuple[int, list[Any]]]:
    aiosmtpd = pytest.importorskip("aiosmtpd.controller", reason="aiosmtpd is in the test extra")

    class Inbox:
        async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
            messages.append(envelope)
            return "250 OK"

    class OnHeldSocket(aiosmtpd.Controller):  # port 0, held from the start (as test_alerts.py)
        def __init__(self, handler: Any, sock: socket.socket) -> None:
            super().__init__(handler, hostname="127.0.0.1", port=sock.getsockname()[1])
            self.sock = sock

        def _create_server(self) -> Any:
            return self.loop.create_server(self._factory_invoker, sock=self.sock, ssl=self.ssl_context)

    messages: list[Any] = []
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    controller = OnHeldSocket(Inbox(), held)
    controller.start()
    yield controller.port, messages
    controller.stop()


@dataclass
class World:
    db: Any
    clock: FakeClock
    alice_id: int
    alice: TestClient
    admin: TestClient
    bob: TestClient

    def running_job(self, notify: dict[str, Any] | None = None) -> int:
        spec = normalized_spec(parse_job(JOB))
        if notify is not None:
            spec["notify"] = notify
        now = self.clock.now()
        with self.db.session() as session:
            job = JobRow(name="train", user_id=self.alice_id, vc="default", priority="normal", state="RUNNING",
                         spec=spec, submitted_at=now, started_at=now, attempt=0)
            job.attempts.append(AttemptRow(number=0, state="RUNNING", started_at=now))
            session.add(job)
            session.flush()
            return job.id

    def end(self, job_id: int, how: str) -> None:
        """The job's attempt ends ``how`` (failed, succeeded, preempted), its event recorded as reconcile does."""
        self.clock.advance(90)
        now = self.clock.now()
        with self.db.session() as session:
            job = session.get(JobRow, job_id)
            assert job is not None
            attempt = job.attempts[-1]
            attempt.finished_at = now
            if how == "failed":
                attempt.state, attempt.exit_code, attempt.reason = "FAILED", 3, "task main-0 exited with code 3"
                event = transitions.fail(job, attempt, attempt.reason, now)
            elif how == "succeeded":
                attempt.state, attempt.reason = "SUCCEEDED", "all tasks succeeded"
                event = transitions.succeed(job, attempt, now)
            else:
                attempt.state, attempt.reason = "PREEMPTED", "preempted for job 9 (high priority)"
                event = transitions.requeue_preempted(job, attempt, now)
            record_event(session, job.id, event)

    def notices(self, job_id: int) -> list[tuple[str, str, str]]:
        with self.db.session() as session:
            return [(n.kind, n.channel, n.state) for n in notice_queries.job_notices(session, job_id)]


@pytest.fixture
def world(db, tmp_path) -> World:
    clock = FakeClock()
    with db.session() as session:
        admin_token = bootstrap_admin(session, clock=clock)
        alice = create_user(session, "alice", is_admin=False, clock=clock)
        alice_token = create_token(session, alice, by=alice, clock=clock)
        alice.email = "alice@example.org"
        alice_id = alice.id
        bob = create_user(session, "bob", is_admin=False, clock=clock)
        bob.email = "bob@example.org"
        bob_token = create_token(session, bob, by=bob, clock=clock)
        session.add(NodeRow(name="n1", backend="local", address="127.0.0.1", cpu_milli=8000, memory_mb=16384,
                            gpus=[], schedulable=True, cordoned=False, labels={}, updated_at=clock.now()))
    backend = LocalBackend(tmp_path / "local", gpus=simulated_gpus(1), cpu_milli=8000, memory_mb=16384)
    app = create_app(AppContext(db=db, backend=backend, clock=clock, email_notices=True,
                                submit_limits=SubmitLimits(webhook_allow=("hooks.test",))))

    def client(token: str) -> TestClient:
        return TestClient(app, headers={"Authorization": f"Bearer {token}"}, raise_server_exceptions=False)

    return World(db, clock, alice_id, client(alice_token), client(admin_token), client(bob_token))


@pytest.mark.postgres  # the notices' table and the users' new columns on both stores
def test_a_failed_job_is_mailed_to_its_owner_and_posted_to_their_webhook_once(world, hook, mailbox) -> None:
    port, handler = hook
    smtp_port, mails = mailbox
    sender = JobNotices(world.db, world.clock, SmtpSettings("127.0.0.1", smtp_port, "yard@example.org", ()),
                        webhook_allow=["127.0.0.1"], external_url="https://yard.example.org")
    job = world.running_job({"on": ["failed", "preempted"], "email": True,
                             "webhook": f"http://127.0.0.1:{port}/hook?token=s3cret"})
    world.end(job, "preempted")
    assert sender.run() == 2
    assert [p["kind"] for p in handler.received] == ["preempted"]
    world.end(job, "failed")  # attempt 1 (as if placed again) fails for good
    assert sender.run() == 2
    assert sender.run() == 0  # nothing twice
    assert JobNotices(world.db, world.clock, sender.smtp, ["127.0.0.1"]).run() == 0  # nor after a restart
    assert world.notices(job) == [("preempted", "email", "sent"), ("preempted", "webhook", "sent"),
                                  ("failed", "email", "sent"), ("failed", "webhook", "sent")]
    assert [m.rcpt_tos for m in mails] == [["alice@example.org"]] * 2  # only the owner's own address
    failed = mails[1].content.decode()
    assert f"Subject: [Trainyard] job {job} (train) failed" in failed
    assert "reason:   task main-0 exited with code 3" in failed and "duration: ran 3m" in failed
    assert f"https://yard.example.org/jobs/{job}" in failed
    payload = handler.received[1]
    assert payload["host"] == f"127.0.0.1:{port}"
    assert {k: payload[k] for k in ("kind", "jobId", "name", "user", "state", "exitCode", "durationSeconds", "url")} \
        == {"kind": "failed", "jobId": job, "name": "train", "user": "alice", "state": "FAILED", "exitCode": 3,
            "durationSeconds": 180.0, "url": f"https://yard.example.org/jobs/{job}"}
    views = world.alice.get(f"/api/v1/jobs/{job}/notices").json()
    assert [(v["kind"], v["channel"], v["state"]) for v in views] == world.notices(job)
    assert "target" not in views[0]  # a webhook's URL may hold a token: not repeated
    assert world.bob.get(f"/api/v1/jobs/{job}/notices").status_code == 404  # not his job


def test_the_account_default_applies_unless_the_job_file_says_otherwise(world) -> None:
    answer = world.alice.put("/api/v1/users/alice/notify", json={"on": ["ended"], "email": True})
    assert answer.status_code == 200, answer.text
    assert answer.json()["notify"]["on"] == ["ended"] and answer.json()["email"] == "alice@example.org"
    by_default, own = world.running_job(), world.running_job({"on": ["preempted"]})
    world.end(by_default, "succeeded")
    world.end(own, "succeeded")
    assert world.notices(by_default) == [("succeeded", "email", "pending")]
    assert world.notices(own) == []  # the job asked only for preemptions
    silent = world.running_job({"on": []})
    world.end(silent, "failed")
    assert world.notices(silent) == []
    # A job stopped while it waits (for a dependency, its turn, a resume) is told as any stop:
    # a trial found that it ended STOPPED without its final event, so without its notice.
    waiting = world.alice.post("/api/v1/jobs", content=JOB, headers={"Content-Type": "application/yaml"})
    assert waiting.status_code == 201, waiting.text
    waiting_id = waiting.json()["id"]
    assert world.alice.post(f"/api/v1/jobs/{waiting_id}/stop").status_code == 200
    assert world.notices(waiting_id) == [("stopped", "email", "pending")]
    # No SMTP server: the e-mail fails at once, with why, and is not retried.
    JobNotices(world.db, world.clock, None).run()
    (view,) = world.alice.get(f"/api/v1/jobs/{by_default}/notices").json()
    assert view["state"] == "failed" and view["tries"] == 1 and "no SMTP server" in view["error"]


def test_a_webhook_that_fails_is_retried_then_failed_and_a_redirect_is_not_followed(world, hook) -> None:
    port, handler = hook
    sender = JobNotices(world.db, world.clock, None, webhook_allow=["127.0.0.0/8"])
    job = world.running_job({"on": ["ended"], "email": False, "webhook": f"http://127.0.0.1:{port}/hook"})
    world.end(job, "failed")
    handler.answer = 503
    sender.run()
    assert world.notices(job) == [("failed", "webhook", "pending")]
    handler.answer = 302
    for _ in range(MAX_TRIES - 1):
        sender.run()
    (view,) = world.alice.get(f"/api/v1/jobs/{job}/notices").json()
    assert (view["state"], view["tries"]) == ("failed", MAX_TRIES) and "redirect not followed" in view["error"]
    assert handler.received == []
    handler.answer = 200
    assert sender.run() == 0  # failed for good


def test_a_name_that_resolves_to_this_machine_is_refused_when_sending(world, hook, monkeypatch) -> None:
    port, handler = hook
    job = world.running_job({"on": ["failed"], "email": False, "webhook": f"http://hooks.example.org:{port}/hook"})
    world.end(job, "failed")
    real = socket.getaddrinfo  # the name passed the check when given; its DNS now says 127.0.0.1
    monkeypatch.setattr(webhooks.socket, "getaddrinfo", lambda host, *a, **k: real("127.0.0.1", *a, **k))
    JobNotices(world.db, world.clock, None).run()  # no allow-list
    (view,) = world.alice.get(f"/api/v1/jobs/{job}/notices").json()
    assert view["state"] == "failed" and "loopback address" in view["error"] and handler.received == []


@pytest.mark.parametrize("url", [
    "http://127.0.0.1/x", "http://[::1]/x", "http://169.254.169.254/latest/meta-data", "http://10.0.0.7/",
    "http://192.168.1.1/", "http://0.0.0.0/", "http://224.0.0.1/", "http://localhost:8080/", "http://[::ffff:127.0.0.1]/",
    "http://100.64.0.1/", "file:///etc/passwd", "gopher://example.org/", "http://user:pw@example.org/",
    "http://[2002:7f00:1::]/",  # 6to4: 127.0.0.1 inside
])
def test_webhooks_to_non_public_addresses_are_refused(url: str) -> None:
    with pytest.raises(Refused):
        check_url(url)


def test_the_admin_allow_list_admits_hosts_and_networks() -> None:
    assert check_url("http://10.1.2.3:9000/h", ["10.1.2.0/24"]) == ("http", "10.1.2.3", 9000)
    assert check_url("https://localhost/h", ["localhost"])[1] == "localhost"
    with pytest.raises(Refused, match="loopback"):
        resolve("localhost", 80, [])
    assert str(resolve("localhost", 80, ["127.0.0.0/8", "::1/128"])) in ("127.0.0.1", "::1")


def test_notify_is_checked_at_submit_and_at_setting_time_with_the_field_path(world) -> None:
    bad = JOB + "notify: {on: [failed], webhook: 'http://169.254.169.254/latest/meta-data'}\n"
    answer = world.alice.post("/api/v1/jobs", content=bad, headers={"Content-Type": "application/yaml"})
    assert answer.status_code == 422 and answer.json()["errors"][0]["path"] == "notify.webhook"
    assert "link-local" in answer.json()["detail"]
    answer = world.alice.post("/api/v1/jobs", content=JOB + "notify: {on: [done]}\n",
                              headers={"Content-Type": "application/yaml"})
    assert answer.status_code == 422 and answer.json()["errors"][0]["path"] == "notify.on"
    allowed = JOB + "notify: {on: [failed], webhook: 'http://hooks.test/h'}\n"  # the admin's allow-list
    assert world.alice.post("/api/v1/jobs?dryRun=true", content=allowed,
                            headers={"Content-Type": "application/yaml"}).status_code == 200
    answer = world.alice.put("/api/v1/users/alice/notify", json={"on": ["failed"], "webhook": "http://10.0.0.1/"})
    assert answer.status_code == 422 and answer.json()["errors"][0]["path"] == "webhook"
    answer = world.alice.put("/api/v1/users/alice/email", json={"email": "alice@example.org\nBcc: x@y.z"})
    assert answer.status_code == 422 and answer.json()["errors"][0]["path"] == "email"
    assert world.alice.put("/api/v1/users/bob/email", json={"email": "me@evil.test"}).status_code == 403
    assert world.alice.get("/api/v1/users/bob/notify").status_code == 403
    answer = world.admin.put("/api/v1/users/bob/email", json={"email": "robert@example.org"})
    assert answer.status_code == 200 and answer.json()["email"] == "robert@example.org"
    assert world.alice.put("/api/v1/users/alice/email", json={"email": None}).json()["email"] is None
    answer = world.alice.put("/api/v1/users/alice/notify", json={"on": ["failed"], "email": True})
    assert answer.status_code == 422 and "no e-mail address" in answer.json()["detail"]


def test_a_job_that_really_fails_is_told_by_the_controllers_alert_tick(make_world, hook) -> None:
    port, handler = hook
    world = make_world(gpus=1, alert_interval_seconds=0.05, alert_receivers=Receivers(webhook_allow=["127.0.0.1"]))
    text = ("name: crash\ntaskRoles:\n  main:\n    commands: ['exit 3']\n"
            f"notify: {{on: [failed], email: false, webhook: 'http://127.0.0.1:{port}/h'}}\n")
    with world.db.session() as session:  # as a server allowing 127.0.0.1 takes it
        job = submit_job(session, session.merge(world.user), parse_job(text), clock=world.clock,
                         limits=SubmitLimits(webhook_allow=("127.0.0.1",))).id
    world.drive(job, ("FAILED",))
    world.drive(job, None, until=lambda _: bool(handler.received), what="the webhook to hear of it")
    (told,) = handler.received
    assert (told["jobId"], told["kind"], told["state"], told["exitCode"]) == (job, "failed", "FAILED", 3)
    assert world.events(job)[-1][0] == "failed"


def test_the_server_sends_job_notices_through_the_smtp_server_without_alert_recipients(tmp_path) -> None:
    receivers = alert_receivers(Settings(home=tmp_path, smtp_host="mail.example.org",
                                         notify_webhook_allow=["10.0.0.0/8"], external_url="https://yard.example.org/"))
    assert receivers.smtp is None  # alerts need smtp_to; job notices go to each owner
    assert receivers.job_smtp is not None and receivers.job_smtp.host == "mail.example.org"
    assert (receivers.external_url, tuple(receivers.webhook_allow)) == ("https://yard.example.org", ("10.0.0.0/8",))


def test_a_webhook_that_answers_without_end_is_read_a_few_kib_and_let_go() -> None:
    from trainyard.monitor import webhooks

    sent: list[int] = []

    class Endless(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Length", str(1 << 30))  # a gigabyte promised
            self.end_headers()
            try:
                for _ in range(1 << 14):
                    self.wfile.write(b"x" * 65536)
                    sent.append(65536)
            except OSError:
                pass  # the sender stopped reading and closed: as it should

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        webhooks.post_json(f"http://127.0.0.1:{server.server_address[1]}/hook", {"job": 1}, allow=["127.0.0.1"])
    finally:
        server.shutdown()
        server.server_close()
    assert sum(sent) < 64 << 20  # the rest of the gigabyte was never read
