"""``yard exec`` and a terminal in a task of a real ``yard up --backend slurm``: a step of its
own in the task's Slurm job (``srun --overlap``, ``--pty`` for a terminal), with the task's
environment, GPUs and working directory."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest
from deadlines import scaled
from e2e.server import Server, wait_until
from websockets.sync.client import connect

from slurm.cluster import slurm_yard_up
from trainyard.client import Client

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def slurm_server(slurm, tmp_path_factory) -> Iterator[Server]:
    """One ``yard up --backend slurm`` for the module (a start costs seconds); each test looks
    at its own job only."""
    with slurm_yard_up(slurm, tmp_path_factory.mktemp("home")) as srv:
        yield srv

SAYS = 'echo "gpus=$CUDA_VISIBLE_DEVICES pwd=$PWD job=$SLURM_JOB_ID"'
JOB = f"""
name: slurm-here
taskRoles:
  main:
    resourcePerInstance: {{gpu: 2, cpu: 1, memoryMB: 128}}
    commands:
      - {SAYS}
      - exec sleep 600
"""


def test_yard_exec_and_a_terminal_run_in_the_tasks_slurm_job(slurm_server: Server) -> None:
    server = slurm_server
    admin = server.admin()
    admin.create_user("bob")
    bob = admin.create_token(user="bob").token
    job = admin.submit(JOB).id
    wait_until(lambda: b"gpus=" in admin.logs(job), timeout=60, what="the Slurm task to start")
    said = admin.logs(job).decode().strip()
    assert said.startswith("gpus=0,1 pwd=/")

    def yard(*args: str, token: str | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
        env = server.env if token is None else {**server.env, "TRAINYARD_TOKEN": token}
        return subprocess.run([sys.executable, "-m", "trainyard.cli.main", *args], env=env, input=stdin,
                              capture_output=True, text=True, timeout=scaled(60))

    ran = yard("exec", str(job), "--", "sh", "-c", SAYS)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == said  # its GPUs, its work dir, its Slurm job
    split = yard("exec", str(job), "--", "sh", "-c", "cat; echo err >&2; exit 6", stdin="piped in\n")
    assert (split.returncode, split.stdout, split.stderr) == (6, "piped in\n", "err\n")
    refused = yard("exec", str(job), "--", "true", token=bob)
    assert refused.returncode != 0 and f"no job {job}" in refused.stderr
    if "each Trainyard user's tasks run as their own OS account" in server.log():  # yard up as root
        # In the task's sandbox, as its account: its processes only, the server's files hidden.
        (state_dir,) = (server.home / "slurm").iterdir()
        assert any((state_dir / "jobs").iterdir())
        probe = (f"id -un; ls /proc | grep -c '^[0-9]'; cat {server.home / 'client.json'} 2>&1 | sed 's/.*: //';"
                 f" ls -A {state_dir / 'jobs'} 2> /dev/null | wc -l")
        inside = yard("exec", str(job), "--", "sh", "-c", probe)
        assert inside.returncode == 0, inside.stderr
        name, processes, client_file, jobs = inside.stdout.split("\n", 3)
        assert (name, client_file, jobs) == ("ty-admin", "No such file or directory", "0\n"), inside.stdout
        assert int(processes) < 10, inside.stdout  # bwrap's init, the task's, and this command's

    # A terminal: srun --pty, resized, and its shell's exit status.
    token = admin._http.headers["Authorization"]
    url = f"ws://127.0.0.1:{server.port}/api/v1/jobs/{job}/tasks/main/0/exec"
    with connect(url, additional_headers={"Authorization": token}, open_timeout=scaled(10)) as ws:
        ws.send(json.dumps({"argv": ["bash", "--norc", "-i"], "tty": True, "rows": 30, "cols": 90}))
        ws.send(b"tty; stty size; exit 4\n")
        frames = []
        while not (frames and isinstance(frames[-1], str)):
            frames.append(ws.recv(timeout=scaled(30)))
    screen = b"".join(f[1:] for f in frames if isinstance(f, bytes)).decode(errors="replace")
    assert "/dev/pts/" in screen and "30 90" in screen and "not a tty" not in screen, screen
    assert json.loads(frames[-1]) == {"exit": 4}

    events = [e.message for e in Client(server.url, token.split()[1]).job(job).events if e.kind == "exec"]
    events = [e for e in events if "id -un" not in e]
    assert events == [f"admin ran `sh -c {SAYS!r}` in task main/0",
                      "admin ran `sh -c 'cat; echo err >&2; exit 6'` in task main/0",
                      "admin ran `bash --norc -i` in task main/0 (with a terminal)"]


def test_yard_exec_reaches_each_task_of_a_gang_across_nodes_on_its_own_node(slurm_server: Server) -> None:
    # Four GPUs each: one node apiece, so the gang is a heterogeneous Slurm job (--het-group).
    admin = slurm_server.admin()
    job = admin.submit("""
name: gang
taskRoles:
  main:
    instances: 2
    resourcePerInstance: {gpu: 4, cpu: 1, memoryMB: 128}
    commands:
      - echo "on=$SLURMD_NODENAME"
      - exec sleep 600
""").id
    for index in (0, 1):
        wait_until(lambda index=index: b"on=" in admin.logs(job, task=f"main/{index}"), timeout=60,
                   what=f"task main/{index} to start")
    nodes = [admin.logs(job, task=f"main/{index}").decode().strip() for index in (0, 1)]
    assert nodes[0] != nodes[1]
    for index, said in enumerate(nodes):
        ran = slurm_server.yard("exec", str(job), "--task", f"main/{index}", "--", "sh", "-c",
                                'echo "on=$SLURMD_NODENAME"; echo "$CUDA_VISIBLE_DEVICES"')
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.splitlines() == [said, "0,1,2,3"]
