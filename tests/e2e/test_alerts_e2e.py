"""Alerts through a real `yard up`: the settings file's webhook and interval reach the
controller, a job that waits too long fires with its pending reason, and stopping it
resolves the alert — both told to a real HTTP receiver in the test."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from e2e.server import running_server, wait_until

pytestmark = pytest.mark.e2e

JOB = "name: NAME\ntaskRoles:\n  main:\n    resourcePerInstance: {gpu: 1}\n    commands: ['sleep 600']\n"


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/alerts", received
    server.shutdown()
    server.server_close()


def test_a_long_wait_is_posted_firing_with_its_reason_then_resolved_when_stopped(
    database_url: str, tmp_path_factory, webhook
) -> None:
    url, received = webhook
    home = tmp_path_factory.mktemp("home")
    (home / "config.yaml").write_text(json.dumps({"alert_interval_seconds": 1, "alert_webhook_urls": [url]}))
    database = None if database_url.startswith("sqlite") else database_url
    with running_server(home, gpus=1, database_url=database) as server:
        admin = server.admin()
        first = admin.submit(JOB.replace("NAME", "holder")).id
        wait_until(lambda: admin.job(first).state == "RUNNING", what="the first job to run")
        second = admin.submit(JOB.replace("NAME", "waiter")).id
        pending = wait_until(lambda: admin.job(second).pending, what="the scheduler to say why it waits")
        admin.set_alert_rule("long-waiting-job", params={"minutes": 0.001})  # taken without a restart

        def alerts_about(status: str) -> list[dict[str, Any]]:
            return [a for payload in received for a in payload["alerts"]
                    if a["labels"].get("job") == str(second) and a["status"] == status]

        (firing,) = wait_until(lambda: alerts_about("firing"), what="the firing alert")
        assert firing["labels"]["alertname"] == "long-waiting-job"
        assert f"job {second} has waited" in firing["annotations"]["description"]
        assert pending.message in firing["annotations"]["description"]  # the pending reason, in words
        admin.stop(second)
        (resolved,) = wait_until(lambda: alerts_about("resolved"), what="the resolved alert")
        assert resolved["endsAt"] != "0001-01-01T00:00:00Z"
        admin.stop(first)
