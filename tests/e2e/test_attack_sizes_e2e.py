"""Issue 27, finding 7 ("one user can fill the machine"), live on the default root install
(``yard up`` as root: per-user task accounts and the bubblewrap sandbox), with small caps
set for this module's server: a 1 MB log, 64 processes a task, 64 KiB of rendered job, 3
waiting jobs a user. Each test is the attack as it was made, and fails on a server that
does not bound that size."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from deadlines import scaled

from e2e.server import Server, running_server, wait_until
from trainyard.backends import cgroups
from trainyard.client import Client

pytestmark = pytest.mark.e2e

LOG_CAP_MB = 1
PIDS_MAX = 64
RENDERED_MAX_KB = 64
MAX_WAITING = 3
CAP_LINE = f"trainyard: log cap of {LOG_CAP_MB} MB reached; further output dropped"


@dataclass
class Cluster:
    server: Server
    admin: Client
    alice: Client
    alice_token: str


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # One server for the module (SQLite in its home): each `yard up` costs 10-15 s.
    settings = {
        "TRAINYARD_TASK_LOG_MAX_MB": str(LOG_CAP_MB),
        "TRAINYARD_TASK_PIDS_MAX": str(PIDS_MAX),
        "TRAINYARD_JOB_RENDERED_MAX_KB": str(RENDERED_MAX_KB),
        "TRAINYARD_MAX_WAITING_JOBS_PER_USER": str(MAX_WAITING),
    }
    with running_server(tmp_path_factory.mktemp("home"), gpus=4, extra_env=settings) as srv:
        token = srv.add_users("alice")["alice"]
        yield Cluster(srv, srv.admin(), Client(srv.url, token), token)


# The attack: `yes` into the log (7.1 GB in 20 s). 5 MB here, then the task goes on to
# write a file in its job directory: proof that it was not killed at the cap.
FLOOD = """
name: flood
taskRoles:
  main:
    resourcePerInstance: {cpu: 0.5, memoryMB: 128}
    commands:
      - yes flood | head -c 5000000
      - head -c 300000 /dev/zero > "$TRAINYARD_JOB_DIR/after-the-flood"
      - echo "still running after the cap"
"""


def test_a_yes_job_s_log_stops_at_the_cap_with_a_note_and_the_task_runs_on(cluster: Cluster) -> None:
    job_id = cluster.alice.submit(FLOOD).id
    job = cluster.alice.wait(job_id, timeout=scaled(90))
    assert (job.state, job.exitCode) == ("SUCCEEDED", 0), job.message

    log = cluster.alice.logs(job_id)
    cap = LOG_CAP_MB << 20
    assert len(log) <= cap + len(CAP_LINE) + 2, f"the log holds {len(log):,} bytes, past its {cap:,}-byte cap"
    assert log.startswith(b"flood\nflood\n")
    assert log.decode().splitlines()[-1] == CAP_LINE
    assert b"still running after the cap" not in log  # dropped, as the last line says

    task = job.attempts[-1].tasks[0]
    assert f"its log reached the cap of {LOG_CAP_MB} MB; further output was dropped" in task.message
    shown = cluster.server.yard("job", str(job_id), token=cluster.alice_token)
    assert shown.returncode == 0 and "its log reached the cap" in shown.stdout, shown.stdout

    # The task ran on past the cap: what it wrote after is in its job directory, whose size
    # `yard job` and the API show.
    assert job.jobDir is not None and job.jobDir.files == 1 and job.jobDir.bytes >= 300_000, job.jobDir
    assert "job dir:" in shown.stdout and "1 file" in shown.stdout, shown.stdout


FORK_BOMB = """
name: forks
taskRoles:
  main:
    resourcePerInstance: {cpu: 0.5, memoryMB: 256}
    commands:
      - |
        python3 - <<'EOF'
        import errno, os, signal, time
        children = []
        try:
            for _ in range(300):
                pid = os.fork()
                if pid == 0:
                    time.sleep(60)
                    os._exit(0)
                children.append(pid)
            print("forked", len(children), "children")
        except OSError as error:
            print("fork failed:", errno.errorcode[error.errno], "after", len(children), "children")
        for pid in children:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        EOF
"""


@pytest.mark.skipif(isinstance(cgroups.detect(), str), reason="no usable cgroups on this machine")
def test_a_task_that_forks_past_its_pids_limit_gets_eagain_and_the_host_does_not(cluster: Cluster) -> None:
    job_id = cluster.alice.submit(FORK_BOMB).id
    job = cluster.alice.wait(job_id, timeout=scaled(90))
    assert (job.state, job.exitCode) == ("SUCCEEDED", 0), job.message
    out = cluster.alice.logs(job_id).decode()
    assert out.startswith("fork failed: EAGAIN after "), out
    forked = int(out.split()[4])
    assert 0 < forked < PIDS_MAX, out  # bash and python count too
    # The host forks on.
    assert subprocess.run(["true"], check=False).returncode == 0


def _blow_up(uses: int) -> str:
    placeholders = " ".join(["<% $parameters.blob %>"] * uses)
    return f"""
name: blow-up
parameters: {{blob: "{'x' * 2000}"}}
taskRoles:
  main:
    resourcePerInstance: {{cpu: 0.5, memoryMB: 128}}
    commands:
      - echo start
      - echo {placeholders}
"""


def test_a_job_whose_parameter_expands_past_the_cap_is_refused_at_submit_and_dry_run(cluster: Cluster) -> None:
    # The attack: a small file whose parameter is used 2,000 times (here 8 KB, 4 MB rendered).
    body = _blow_up(2000)
    assert len(body) < 64 * 1024
    headers = {"Authorization": f"Bearer {cluster.alice_token}", "Content-Type": "application/yaml"}
    for params in ({"dryRun": "true"}, {}):
        answer = httpx.post(cluster.server.url + "/api/v1/jobs", params=params, content=body, headers=headers,
                            timeout=scaled(30))
        assert answer.status_code == 422, (params, answer.status_code, answer.text[:500])
        errors = answer.json()["errors"]
        assert [e["path"] for e in errors] == ["taskRoles.main.commands[1]"], errors
        assert f"more than {RENDERED_MAX_KB} KiB" in errors[0]["message"], errors
        assert "job_rendered_max_kb" in errors[0]["message"], errors
    assert not cluster.alice.jobs(name="blow-up").items
    # Under the cap the same job is fine.
    assert cluster.alice.submit(_blow_up(10), dry_run=True).job["name"] == "blow-up"


BLOCKER = """
name: blocker
taskRoles:
  main:
    resourcePerInstance: {gpu: 4, cpu: 0.5, memoryMB: 64}
    commands: [sleep 600]
"""
WAITER = """
name: waiter-{n}
taskRoles:
  main:
    resourcePerInstance: {{gpu: 1, cpu: 0.5, memoryMB: 64}}
    commands: ["true"]
"""


def test_a_user_s_waiting_jobs_past_the_limit_are_refused_with_429(cluster: Cluster) -> None:
    blocker = cluster.admin.submit(BLOCKER).id
    wait_until(lambda: cluster.admin.job(blocker).state == "RUNNING", timeout=60, what="the blocker to run")
    waiting = [cluster.alice.submit(WAITER.format(n=n)).id for n in range(MAX_WAITING)]
    assert {cluster.alice.job(j).state for j in waiting} == {"WAITING"}

    headers = {"Authorization": f"Bearer {cluster.alice_token}", "Content-Type": "application/yaml"}
    for params in ({"dryRun": "true"}, {}):
        answer = httpx.post(cluster.server.url + "/api/v1/jobs", params=params, content=WAITER.format(n=9),
                            headers=headers, timeout=scaled(30))
        assert answer.status_code == 429, (params, answer.status_code, answer.text[:500])
        assert f"alice has {MAX_WAITING} jobs waiting" in answer.json()["detail"], answer.text
        assert "yard stop" in answer.json()["detail"]
    refused = cluster.server.yard("submit", "-", input=WAITER.format(n=9), token=cluster.alice_token)
    assert refused.returncode != 0 and "max_waiting_jobs_per_user" in refused.stderr, refused.stderr

    # Once one of alice's jobs no longer waits, she may submit again.
    cluster.admin.stop(blocker)
    cluster.alice.stop(waiting[0])
    assert cluster.alice.submit(WAITER.format(n=9)).id
