"""``kill -9`` the server while jobs run; the restarted server re-adopts them, loses nothing."""

from __future__ import annotations

import itertools
import json
import os
import signal
import threading

import httpx
import pytest
from deadlines import scaled

from e2e.server import Server, wait_until
from trainyard.backends.local import procfs

pytestmark = pytest.mark.e2e


def _job(name: str, exit_code: int, gates) -> str:
    # The task records each start, then waits for its release file and exits.
    return f"""
name: {name}
taskRoles:
  main:
    resourcePerInstance: {{gpu: 1}}
    commands:
      - echo start >> {gates}/starts-{name}
      - echo running
      - while [ ! -e {gates}/release-{name} ]; do sleep 0.05; done
      - exit {exit_code}
"""


def test_a_killed_server_readopts_running_tasks_and_records_exits_that_happened_while_down(
    server: Server, gates
) -> None:
    client = server.admin()
    ended_while_down = client.submit(_job("down", 7, gates)).id
    still_running = client.submit(_job("alive", 0, gates)).id
    for job_id in (ended_while_down, still_running):
        wait_until(lambda job_id=job_id: client.logs(job_id) == b"running\n", what=f"job {job_id} to run")
    queued = client.submit(_job("queued", 0, gates).replace("gpu: 1", "gpu: 3")).id
    assert client.job(queued).state == "WAITING"

    server.kill9()
    (gates / "release-down").touch()
    # The task ends while no server is there to see it.
    (cluster_dir,) = (server.home / "local").iterdir()  # one store, one cluster id
    exit_file = cluster_dir / "tasks" / str(ended_while_down) / "0" / "main-0-0" / "exit.json"
    wait_until(exit_file.exists, what="the released task's supervisor to record its exit")

    server.start()
    client = server.admin()
    down = client.wait(ended_while_down, timeout=scaled(30))
    assert (down.state, down.exitCode) == ("FAILED", 7)
    assert client.job(still_running).state == "RUNNING"

    (gates / "release-alive").touch()
    assert client.wait(still_running, timeout=scaled(30)).state == "SUCCEEDED"
    (gates / "release-queued").touch()
    assert client.wait(queued, timeout=scaled(30)).state == "SUCCEEDED"

    for name in ("down", "alive", "queued"):
        assert (gates / f"starts-{name}").read_text() == "start\n", f"{name} started more than once"
    assert [len(client.job(j).attempts) for j in (ended_while_down, still_running, queued)] == [1, 1, 1]


def test_a_task_that_loses_its_supervisor_and_the_server_keeps_its_exit_code_and_never_runs_twice(
    server: Server, gates
) -> None:
    client = server.admin()
    job_id = client.submit(_job("orphan", 0, gates).replace("taskRoles:", "jobRetryCount: 1\ntaskRoles:")).id
    wait_until(lambda: client.logs(job_id) == b"running\n", what="the job to run")
    (cluster_dir,) = (server.home / "local").iterdir()
    task_dir = cluster_dir / "tasks" / str(job_id) / "0" / "main-0-0"
    claim = json.loads((task_dir / "pid.json").read_text())
    os.kill(claim["supervisor"]["pid"], signal.SIGKILL)
    server.kill9()
    (gates / "release-orphan").touch()  # the task ends with neither its supervisor nor a server
    wait_until(lambda: not procfs.group_alive(claim["task"]["pgid"], claim["task"]["start_time"]),
               what="the task to end")

    server.start()
    client = server.admin()
    done = client.wait(job_id, timeout=scaled(30))
    assert (done.state, done.exitCode, len(done.attempts)) == ("SUCCEEDED", 0, 1)
    assert "supervisor was lost" in done.attempts[0].tasks[0].message
    assert (gates / "starts-orphan").read_text() == "start\n"


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_a_new_database_on_the_same_home_never_adopts_the_old_tasks(server: Server) -> None:
    client = server.admin()
    old = client.submit("name: old\ntaskRoles:\n  m:\n    commands: ['echo from the old database']\n")
    assert client.wait(old.id, timeout=scaled(30)).state == "SUCCEEDED"
    server.stop()
    (server.home / "trainyard.db").unlink()
    server.start()
    client = server.admin()
    new = client.submit("name: new\ntaskRoles:\n  m:\n    commands: ['echo from the new database']\n")
    assert new.id == old.id  # same job id, different job
    assert client.wait(new.id, timeout=scaled(30)).state == "SUCCEEDED"
    assert client.logs(new.id) == b"from the new database\n"


def test_ctrl_c_stops_the_server_but_not_the_jobs(server: Server, gates) -> None:
    client = server.admin()
    job_id = client.submit(_job("survivor", 0, gates)).id
    wait_until(lambda: client.logs(job_id) == b"running\n", what="the job to run")

    server.stop()  # SIGINT, as Ctrl-C in the terminal sends
    assert server.process.returncode == 0
    said = server.log()
    assert "SIGINT: stopping the server; jobs keep running" in said and said.rstrip().endswith("stopped")
    server.start()
    client = server.admin()
    assert client.job(job_id).state == "RUNNING"
    (gates / "release-survivor").touch()
    assert client.wait(job_id, timeout=scaled(30)).state == "SUCCEEDED"
    assert (gates / "starts-survivor").read_text() == "start\n"


@pytest.mark.parametrize("database_url", ["sqlite", "postgresql"], indirect=True)
def test_every_submit_answered_201_before_a_kill_9_is_in_the_store_after_it(server: Server) -> None:
    """Many clients submit at once (issue 33's load, small); the server is killed in the
    middle of them. A submit is answered only once its job is committed: every job whose
    201 came back is there after the restart, as it was submitted. (What is lost is only
    what was never answered.)"""
    headers = {"Authorization": f"Bearer {server.admin().create_token().token}",
               "Content-Type": "application/json"}
    answered: list[tuple[int, str]] = []
    enough = threading.Event()

    def client(k: int) -> None:
        with httpx.Client(base_url=server.url + "/api/v1", headers=headers, timeout=scaled(30)) as http:
            for i in itertools.count():
                name = f"acked-{k}-{i}"
                body = json.dumps({"name": name, "taskRoles": {"w": {"resourcePerInstance": {"gpu": 4},
                                                                      "commands": ["true"]}}})
                try:
                    response = http.post("/jobs", content=body)
                except httpx.TransportError:
                    return  # the server is gone: this one was never answered
                if response.status_code != 201:
                    return
                answered.append((response.json()["id"], name))
                if len(answered) >= 150:
                    enough.set()

    clients = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for thread in clients:
        thread.start()
    try:
        assert enough.wait(scaled(120)), "150 submits were not answered"
        server.kill9()
    finally:
        for thread in clients:
            thread.join()

    server.start()
    admin = server.admin()
    assert [(job_id, admin.job(job_id).name) for job_id, _ in answered] == answered
