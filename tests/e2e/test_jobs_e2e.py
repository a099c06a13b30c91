"""End to end through a real ``yard up``: submit, run, wait, logs, stop, retry, bad input."""

from __future__ import annotations

import json

import pytest
from deadlines import scaled

from e2e.server import Server, wait_until
from trainyard.client import AuthError, TrainyardError

pytestmark = [pytest.mark.e2e, pytest.mark.idle_cluster]  # the worker's shared `yard up` (conftest.py)

HELLO = """
name: hello
taskRoles:
  main:
    resourcePerInstance: {gpu: 1, cpu: 0.5, memoryMB: 128}
    commands:
      - echo "hello from rank $RANK of $WORLD_SIZE on GPU $CUDA_VISIBLE_DEVICES"
"""


@pytest.mark.postgres
@pytest.mark.own_server  # it lists every job of the server
def test_a_job_is_submitted_runs_succeeds_and_its_logs_can_be_read(server: Server) -> None:
    out = server.yard("submit", "-", "--json", input=HELLO)
    assert out.returncode == 0, out.stderr
    job_id = json.loads(out.stdout)["id"]

    waited = server.yard("wait", str(job_id), "--timeout", "30")
    assert waited.returncode == 0, waited.stdout + waited.stderr

    logs = server.yard("logs", str(job_id))
    assert logs.stdout.strip() == "hello from rank 0 of 1 on GPU 0" and logs.stderr == ""

    job = json.loads(server.yard("job", str(job_id), "--json").stdout)
    assert job["state"] == "SUCCEEDED"
    assert job["exitCode"] == 0
    assert [e["kind"] for e in job["events"]][:2] == ["submitted", "placed"]
    task = job["attempts"][0]["tasks"][0]
    assert (task["state"], task["exitCode"], task["gpus"]) == ("SUCCEEDED", 0, [0])

    listed = json.loads(server.yard("jobs", "--json").stdout)
    assert [j["id"] for j in listed["items"]] == [job_id]
    assert listed["items"][0]["state"] == "SUCCEEDED"

    # A job of two tasks: the log shown is the first's, and stderr names the others.
    two = HELLO.replace("  main:\n", "  main:\n    instances: 2\n").replace("gpu: 1", "gpu: 0")
    pair = json.loads(server.yard("submit", "-", "--json", input=two).stdout)["id"]
    assert server.yard("wait", str(pair), "--timeout", "30").returncode == 0
    logs = server.yard("logs", str(pair))
    assert logs.stdout.startswith("hello from rank 0 of 2")
    assert logs.stderr == "yard: showed task main/0 of 2; the others: --task main/1 (every task: --all)\n"


def test_two_instances_get_distributed_wiring(server: Server) -> None:
    spec = """
name: wiring
taskRoles:
  worker:
    instances: 2
    resourcePerInstance: {gpu: 1, cpu: 0.5, memoryMB: 128, ports: {http: 1}}
    commands:
      - >-
        echo "$RANK $WORLD_SIZE $LOCAL_RANK $MASTER_ADDR $MASTER_PORT $PAI_TASK_ROLE_worker_HOST_LIST
        $PAI_TASK_ROLE_TASK_COUNT_worker $PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX $CUDA_VISIBLE_DEVICES
        $PAI_PORT_LIST_worker_0_http $TRAINYARD_JOB_ID $TRAINYARD_ATTEMPT"
"""
    job = server.admin().submit(spec)
    done = server.admin().wait(job.id, timeout=scaled(30))
    assert done.state == "SUCCEEDED"
    lines = [server.admin().logs(job.id, task=f"worker/{i}").decode().split() for i in (0, 1)]
    assert [line[0] for line in lines] == ["0", "1"]
    assert {line[1] for line in lines} == {"2"}
    assert lines[0][3] == lines[1][3] == "127.0.0.1"
    assert lines[0][4] == lines[1][4] and int(lines[0][4]) > 0  # one MASTER_PORT for all
    assert lines[0][5] == "127.0.0.1,127.0.0.1"
    assert sorted(line[8] for line in lines) == ["0", "1"]  # each task its own GPU
    assert lines[0][9] == lines[1][9]  # everybody sees worker 0's port
    assert lines[0][10] == str(job.id) and lines[0][11] == "0"


def test_a_failing_job_is_retried_as_a_new_attempt(server: Server) -> None:
    spec = """
name: flaky
jobRetryCount: 2
taskRoles:
  main:
    commands:
      - echo "attempt $TRAINYARD_ATTEMPT"
      - test "$TRAINYARD_ATTEMPT" -ge 1
"""
    client = server.admin()
    job = client.wait(client.submit(spec).id, timeout=scaled(30))
    assert job.state == "SUCCEEDED"
    assert [a.state for a in job.attempts] == ["FAILED", "SUCCEEDED"]
    assert job.retriesUsed == 1
    assert client.logs(job.id, attempt=0) == b"attempt 0\n"
    assert "retried" in [e.kind for e in job.events]


def test_a_job_that_keeps_failing_ends_failed_with_its_exit_code(server: Server) -> None:
    client = server.admin()
    job = client.submit("name: bad\njobRetryCount: 1\ntaskRoles:\n  main:\n    commands: ['exit 3']\n")
    done = client.wait(job.id, timeout=scaled(30))
    assert (done.state, done.exitCode, len(done.attempts)) == ("FAILED", 3, 2)
    assert server.yard("wait", str(job.id)).returncode == 1


def test_stop_sends_sigterm_and_the_job_ends_stopped(server: Server) -> None:
    spec = """
name: long
stopGracePeriodSeconds: 5
taskRoles:
  main:
    commands:
      - trap 'echo got TERM; exit 0' TERM
      - echo started
      - sleep 300 & wait
"""
    client = server.admin()
    job_id = client.submit(spec).id
    wait_until(lambda: client.logs(job_id) == b"started\n", what="the task to start")
    assert server.yard("stop", str(job_id)).returncode == 0
    done = client.wait(job_id, timeout=scaled(30))
    assert done.state == "STOPPED"
    assert client.logs(job_id) == b"started\ngot TERM\n"
    assert "stopped by admin" in done.message


def test_logs_follow_streams_until_the_task_ends(server: Server) -> None:
    client = server.admin()
    job_id = client.submit(
        "name: f\ntaskRoles:\n  m:\n    commands: ['for i in 1 2 3; do echo line $i; sleep 0.3; done']\n"
    ).id
    out = server.yard("logs", str(job_id), "-f")
    assert out.returncode == 0
    assert out.stdout == "line 1\nline 2\nline 3\n"
    assert server.yard("logs", str(job_id), "--tail", "1").stdout == "line 3\n"


def test_a_small_job_starts_while_a_larger_one_waits(server: Server) -> None:
    client = server.admin()
    hog = client.submit("name: hog\ntaskRoles:\n  m:\n    resourcePerInstance: {gpu: 3}\n    commands: ['sleep 300']\n")
    wait_until(lambda: client.job(hog.id).state == "RUNNING", what="the hog to run")
    big = client.submit("name: big\ntaskRoles:\n  m:\n    resourcePerInstance: {gpu: 2}\n    commands: ['sleep 1']\n")
    small = client.submit(
        "name: small\ntaskRoles:\n  m:\n    resourcePerInstance: {gpu: 0.5}\n    commands: ['true']\n"
    )
    assert client.wait(small.id, timeout=scaled(30)).state == "SUCCEEDED"
    waiting = client.job(big.id)
    assert waiting.state == "WAITING"
    assert waiting.pending.reason == "NO_FIT"
    assert "needs 2 GPU" in waiting.pending.message
    client.stop(hog.id)
    assert client.wait(big.id, timeout=scaled(30)).state == "SUCCEEDED"


def test_dry_run_validates_and_creates_nothing(server: Server) -> None:
    before = server.admin().jobs().items  # a shared server's earlier jobs, all ended
    spec = "name: dry\nsecrets: {key: hunter2}\ntaskRoles:\n  m:\n    commands: ['echo <% $secrets.key %>']\n"
    out = server.yard("submit", "--dry-run", "-", input=spec)
    assert out.returncode == 0, out.stderr
    assert "hunter2" not in out.stdout and "valid" in out.stdout
    assert server.admin().jobs().items == before


BAD_FILES = [
    ("name: x\ntaskRoles: [\n", "line"),
    ("name: x\ntaskRoles:\n  w:\n    instancez: 1\n    commands: [a]\n", "taskRoles.w.instancez"),
    ("name: x\ntaskRoles:\n  w:\n    instances: 0\n    commands: [a]\n", "taskRoles.w.instances"),
    ("name: x\ntaskRoles:\n  w:\n    resourcePerInstance: {gpu: 5}\n    commands: [a]\n", "taskRoles.w"),
    ("name: x\ntaskRoles:\n  w:\n    instances: 3\n    resourcePerInstance: {gpu: 2}\n    commands: [a]\n", "in total"),
]


@pytest.mark.parametrize(("text", "mentions"), BAD_FILES)
def test_bad_job_files_are_refused_with_a_clear_422_and_nothing_is_stored(
    server: Server, text: str, mentions: str
) -> None:
    client = server.admin()
    before = client.jobs().items  # a shared server's earlier jobs, all ended
    with pytest.raises(TrainyardError) as caught:
        client.submit(text)
    assert caught.value.status == 422
    assert mentions in caught.value.message
    out = server.yard("submit", "-", input=text)
    assert out.returncode == 1
    assert out.stderr.startswith("yard: ") and "Traceback" not in out.stderr
    assert client.jobs().items == before


def test_tokens_are_required_and_users_see_only_their_own_jobs(server: Server) -> None:
    admin = server.admin()
    # Users no other test makes: on the shared server, alice and bob have jobs of tests before.
    admin.create_user("dora")
    admin.create_user("eve")
    dora_token = json.loads(server.yard("token", "create", "--user", "dora", "--json").stdout)["token"]
    eve_token = admin.create_token(user="eve").token

    from trainyard.client import Client

    dora, eve = Client(server.url, dora_token), Client(server.url, eve_token)
    job_id = dora.submit("name: mine\ntaskRoles:\n  m:\n    commands: ['sleep 300']\n").id
    assert dora.job(job_id).user == "dora"
    for call in (lambda: eve.job(job_id), lambda: eve.stop(job_id), lambda: eve.logs(job_id)):
        with pytest.raises(TrainyardError) as caught:
            call()
        assert caught.value.status == 404
    assert eve.jobs().items == []
    assert [j.id for j in admin.jobs(user="dora").items] == [job_id]
    with pytest.raises(AuthError) as caught:
        eve.create_user("mallory")
    assert caught.value.status == 403
    with pytest.raises(AuthError):
        eve.create_token(user="dora")
    assert admin.stop(job_id).state in ("STOPPING", "STOPPED")

    assert server.yard("jobs", token="ty_not-a-token").returncode == 4
    no_token = Client(server.url, None)
    with pytest.raises(AuthError) as caught:
        no_token.jobs()
    assert caught.value.status == 401


def test_an_unreachable_server_is_one_clear_line(server: Server) -> None:
    env_url = "http://127.0.0.1:9"
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "trainyard.cli.main", "jobs"], capture_output=True, text=True,
                         env={**server.env, "TRAINYARD_URL": env_url})
    assert out.returncode == 3
    assert len(out.stderr.strip().splitlines()) == 1 and "cannot reach" in out.stderr


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_health_openapi_and_nodes_answer(server: Server) -> None:
    import httpx

    health = httpx.get(server.url + "/api/v1/healthz").json()
    assert health["status"] == "ok" and health["backend"] == "local" and health["database"] == "sqlite"
    paths = httpx.get(server.url + "/api/v1/openapi.json").json()["paths"]
    assert {"/api/v1/jobs", "/api/v1/jobs/{job_id}/logs", "/api/v1/nodes"} <= set(paths)
    assert httpx.get(server.url + "/docs").status_code == 200
    nodes = json.loads(server.yard("nodes", "--json").stdout)
    assert len(nodes) == 1 and nodes[0]["simulated"] and len(nodes[0]["gpus"]) == 4
    assert all(g["simulated"] and g["model"] == "V100" for g in nodes[0]["gpus"])  # named as a model, marked apart
    assert "(simulated)" in server.yard("nodes").stdout


@pytest.mark.parametrize("database_url", ["sqlite", "postgresql"], indirect=True)
def test_hostile_requests_get_4xx_never_500(server: Server) -> None:
    import concurrent.futures

    import httpx

    token = json.loads((server.home / "client.json").read_text())["token"]
    http = httpx.Client(base_url=server.url + "/api/v1", headers={"Authorization": f"Bearer {token}"})
    cases = [
        ("GET", "/jobs/99999999999999999999", {}),
        ("GET", "/jobs/0", {}),
        ("GET", "/jobs/abc", {}),
        ("GET", "/jobs?before=99999999999999999999", {}),
        ("GET", "/jobs?limit=-5", {}),
        ("GET", "/jobs?user=a%00b", {}),
        ("GET", "/jobs?vc=%00", {}),
        ("GET", "/jobs?state=NOPE", {}),
        ("POST", "/jobs", {"content": b"\xff\xfe\x00garbage"}),
        ("POST", "/jobs", {"content": b"x" * (2 << 20)}),
        ("POST", "/jobs", {"content": b"[" * 100000, "headers": {"Content-Type": "application/json"}}),
        ("POST", "/jobs", {"content": b"name: x\ndescription: !!binary aGVsbG8=\ntaskRoles: {m: {commands: [a]}}"}),
        ("POST", "/jobs", {"content": b"name: x\ntaskRoles: {m: {commands: [a], resourcePerInstance: {cpu: 100}}}"}),
        ("POST", "/tokens", {"json": {"name": "a\x00b"}}),
        ("POST", "/users", {"json": {"name": "x" * 1000}}),
        ("POST", "/users", {"content": b"not json", "headers": {"Content-Type": "application/json"}}),
        ("GET", "/nope", {}),
    ]
    for method, path, kwargs in cases:
        response = http.request(method, path, **kwargs)
        assert 400 <= response.status_code < 500, (path, response.status_code, response.text[:200])
        assert "detail" in response.json() and "Traceback" not in response.text

    spec = b"name: s\ntaskRoles: {m: {instances: 2, commands: ['sleep 300']}}"
    job_id = http.post("/jobs", content=spec).json()["id"]
    assert http.get(f"/jobs/{job_id}/logs", params={"task": "m/\u00b2"}).status_code == 422
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda _: http.post(f"/jobs/{job_id}/stop").status_code, range(16)))
    assert all(code in (200, 409) for code in codes), codes
    assert server.admin().wait(job_id, timeout=scaled(30)).state == "STOPPED"
