"""``GET /metrics`` against a real Prometheus (Debian's ``prometheus`` package): it scrapes a
real ``yard up`` with the admin's token, and its HTTP API answers how many GPUs a running
job holds; ``promtool check metrics`` finds nothing to lint on the page.

Outside CI a machine without Prometheus skips these, saying why; ``.ci/run`` installs it and
sets ``TRAINYARD_REQUIRE_PROMETHEUS=1``, which makes a missing one a failure.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from deadlines import scaled
from prometheus_client.parser import text_string_to_metric_families

from e2e.server import Server, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.idle_cluster]  # the worker's shared `yard up` (conftest.py)

REQUIRE_PROMETHEUS = os.environ.get("TRAINYARD_REQUIRE_PROMETHEUS") == "1"

HOLDS_TWO_GPUS = """
name: holds-two
taskRoles:
  main:
    resourcePerInstance: {gpu: 2, cpu: 0.5, memoryMB: 128}
    commands: ['sleep 600']
"""


def prometheus_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        why = f"{name} is not installed (Debian: apt-get install prometheus)"
        if REQUIRE_PROMETHEUS:
            pytest.fail(f"{why}, and TRAINYARD_REQUIRE_PROMETHEUS=1 requires it")
        pytest.skip(why)
    return path


def admin_token(server: Server) -> str:
    token: str = json.loads((server.home / "client.json").read_text())["token"]
    return token


def scrape(server: Server) -> httpx.Response:
    return httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {admin_token(server)}"},
                     timeout=scaled(10))


class Prometheus:
    """A Prometheus server scraping one ``yard up`` every second, on a port the kernel gives
    it (it listens on port 0; the test finds the port among the process's sockets)."""

    def __init__(self, binary: str, server: Server, folder: Path) -> None:
        self.port: int | None = None
        token_file = folder / "token"
        token_file.write_text(admin_token(server))
        config = folder / "prometheus.yml"
        config.write_text(f"""
global: {{scrape_interval: 1s, scrape_timeout: 1s}}
scrape_configs:
  - job_name: trainyard
    honor_labels: true
    authorization: {{credentials_file: {token_file}}}
    static_configs: [{{targets: ["127.0.0.1:{server.port}"]}}]
""")
        self.log = folder / "prometheus.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [binary, f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
                 "--web.listen-address=127.0.0.1:0"],
                stdout=log, stderr=subprocess.STDOUT,
            )

    def api(self, path: str, **params: str) -> dict | None:
        """An answer of Prometheus' HTTP API, or None while it is not yet serving."""
        assert self.process.poll() is None, "prometheus exited:\n" + self.log.read_text(errors="replace")
        if self.port is None:
            listening = [c.laddr.port for c in psutil.Process(self.process.pid).net_connections("tcp")
                         if c.status == psutil.CONN_LISTEN]
            if not listening:
                return None
            (self.port,) = listening
        try:
            response = httpx.get(f"http://127.0.0.1:{self.port}/api/v1/{path}", params=params, timeout=scaled(2))
        except httpx.TransportError:
            return None
        if response.status_code != 200:
            return None
        answer: dict = response.json()["data"]
        return answer

    def target_health(self) -> tuple[str, str] | None:
        targets = self.api("targets")
        if not targets or not targets["activeTargets"]:
            return None
        target = targets["activeTargets"][0]
        return target["health"], target["lastError"]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(scaled(10))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def prometheus(server: Server, tmp_path: Path) -> Iterator[Prometheus]:
    running = Prometheus(prometheus_tool("prometheus"), server, tmp_path)
    try:
        yield running
    finally:
        running.stop()


def test_prometheus_scrapes_yard_up_and_answers_the_gpus_a_running_job_holds(
    server: Server, prometheus: Prometheus
) -> None:
    with server.admin() as sdk:
        job = sdk.submit(HOLDS_TWO_GPUS)
        wait_until(lambda: sdk.job(job.id).state == "RUNNING", timeout=60, what="the job to run")

    # Polled until up, not judged on the first scrape: on a busy machine one scrape may
    # overrun the 1 s timeout (health "down", "context deadline exceeded"), and the next not.
    seen: list[tuple[str, str] | None] = []

    def scraped_up() -> bool:
        seen.append(prometheus.target_health())
        return seen[-1] is not None and seen[-1][0] == "up"

    try:
        wait_until(scraped_up, timeout=90, what="Prometheus to scrape the server successfully")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; the target's last health and error: {seen[-1]}") from None

    def allocated() -> list[dict] | None:
        answer = prometheus.api("query", query="trainyard_gpus_allocated")
        result = answer["result"] if answer else []
        return result if result and float(result[0]["value"][1]) == 2 else None

    series = wait_until(allocated, timeout=90, what="Prometheus to have scraped the job's 2 GPUs")
    assert len(series) == 1  # the one local node, its one (simulated) model
    assert series[0]["metric"]["job"] == "trainyard"  # no job label of ours: Prometheus' own, the scrape job
    assert series[0]["metric"]["node"] and series[0]["metric"]["model"]
    total = prometheus.api("query", query="sum(trainyard_gpus_total)")
    assert total is not None and float(total["result"][0]["value"][1]) == 4
    # With honor_labels (docs/admin/monitoring.md's scrape config), a job's own metrics keep its id as `job`.
    running = prometheus.api("query", query="trainyard_job_running_seconds")
    assert running is not None and [r["metric"]["job"] for r in running["result"]] == [str(job.id)]


def job_starts(page: str) -> float:
    """The page's count of job starts (its start latency histogram's)."""
    return next(s.value for f in text_string_to_metric_families(page) for s in f.samples
                if s.name == "trainyard_job_start_latency_seconds_count")


def test_promtool_finds_nothing_to_lint_on_the_metrics_page(server: Server) -> None:
    promtool = prometheus_tool("promtool")
    # The shared server counts the starts of the tests' jobs before this one's too.
    starts = job_starts(scrape(server).text)
    with server.admin() as sdk:
        job = sdk.submit(HOLDS_TWO_GPUS)
        wait_until(lambda: sdk.job(job.id).state == "RUNNING", timeout=60, what="the job to run")
    # Once the controller's sampling has run, the page carries node and task samples too,
    # so that promtool lints every kind of metric on it.
    def sampled_page() -> httpx.Response | None:
        page = scrape(server)
        names = {(s.name, s.value) for f in text_string_to_metric_families(page.text) for s in f.samples}
        sampled = ("trainyard_node_up", 1.0) in names and any(n == "trainyard_task_cpu_cores" for n, _ in names)
        return page if sampled else None

    page = wait_until(sampled_page, timeout=90, what="a page with the node up and the running task's samples")
    assert page.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert 'trainyard_jobs{state="RUNNING"} 1.0' in page.text
    assert job_starts(page.text) == starts + 1
    checked = subprocess.run([promtool, "check", "metrics"], input=page.text, capture_output=True, text=True,
                             timeout=scaled(60))
    problems = checked.stdout + checked.stderr
    assert checked.returncode == 0 and problems == "", problems


def test_scraping_without_a_token_is_refused_with_401(server: Server) -> None:
    assert httpx.get(server.url + "/metrics", timeout=scaled(10)).status_code == 401
