"""``yard exec`` into a running task through a real ``yard up`` (as root: per-user accounts
and the bubblewrap sandbox, the default install), and in a Podman container task.

The command must share what the task has: its account, working directory, GPUs, private
/tmp (the sandbox) and cgroup; stream its output apart; take stdin; exit with the
command's status. Bob, a third user, gets 404 as for a job that does not exist, and every
exec is an event on the job.
"""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from deadlines import scaled
from podman_support import needs_podman
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from e2e.server import Server, ensure_user, wait_until
from trainyard.client import Client

pytestmark = [pytest.mark.e2e, pytest.mark.idle_cluster]  # the worker's shared `yard up` (conftest.py)

SAYS = 'echo "user=$(id -un) pwd=$PWD gpus=$CUDA_VISIBLE_DEVICES"'

PROCESS_JOB = f"""
name: here
taskRoles:
  main:
    resourcePerInstance: {{gpu: 1, cpu: 0.5, memoryMB: 256}}
    commands:
      - echo task-only > /tmp/only-in-the-sandbox
      - cat /proc/self/cgroup > cgroup.txt
      - {SAYS}
      - exec sleep 600
"""


class Running:
    """Alice's running job, and what its task said about itself."""

    def __init__(self, server: Server, spec: str) -> None:
        self.server = server
        admin = server.admin()
        for name in ("alice", "bob"):
            ensure_user(admin, name)
        self.alice = admin.create_token(user="alice").token
        self.bob = admin.create_token(user="bob").token
        client = Client(server.url, self.alice)
        self.job = client.submit(spec).id
        wait_until(lambda: b"user=" in client.logs(self.job), timeout=120, what="the task to start")
        self.said = client.logs(self.job).decode().splitlines()[-1]

    def yard(self, *args: str, token: str | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
        return self.server.yard(*args, input=stdin, token=token or self.alice)

    def events(self) -> list[str]:
        return [e.message for e in Client(self.server.url, self.alice).job(self.job).events if e.kind == "exec"]


@pytest.fixture
def running(server: Server) -> Iterator[Running]:
    yield Running(server, PROCESS_JOB)


def test_yard_exec_runs_in_the_tasks_account_directory_gpus_sandbox_and_cgroup(running: Running) -> None:
    job = str(running.job)
    said = running.yard("exec", job, "--", "sh", "-c", SAYS)
    assert said.returncode == 0, said.stderr
    assert said.stdout.strip() == running.said and "gpus=0" in said.stdout  # one GPU, as the task got
    # The sandbox's own /tmp: only a command inside it sees the task's file.
    assert running.yard("exec", job, "--", "cat", "/tmp/only-in-the-sandbox").stdout == "task-only\n"
    # Its cgroup (where this node enforces limits: the task's own), read in its work dir.
    groups = running.yard("exec", job, "--", "sh", "-c", "cat /proc/self/cgroup; echo; cat cgroup.txt").stdout
    assert groups.split("\n\n")[0] == groups.split("\n\n")[1].rstrip("\n"), groups

    # stdout and stderr stay apart; the exit status is the command's.
    split = running.yard("exec", job, "--task", "main/0", "--", "sh", "-c", "echo out; echo err >&2; exit 7")
    assert (split.returncode, split.stdout, split.stderr) == (7, "out\n", "err\n")
    # stdin reaches the command, and its end too.
    assert running.yard("exec", job, "--", "wc", "-c", stdin="hi\n" * 1000).stdout.strip() == "3000"
    # Arguments go as they are: no shell on the way.
    literal = running.yard("exec", job, "--", "printf", "%s|", "$HOME", "a b", ";echo x", "--task")
    assert literal.stdout == "$HOME|a b|;echo x|--task|"

    refused = running.yard("exec", job, "--", "true", token=running.bob)
    assert refused.returncode != 0 and f"no job {running.job}" in refused.stderr
    missing = running.yard("exec", job, "--task", "main/3", "--", "true")
    assert missing.returncode != 0 and "no running task main/3" in missing.stderr

    assert running.events() == [
        f"alice ran `sh -c {SAYS!r}` in task main/0",
        "alice ran `cat /tmp/only-in-the-sandbox` in task main/0",
        "alice ran `sh -c 'cat /proc/self/cgroup; echo; cat cgroup.txt'` in task main/0",
        "alice ran `sh -c 'echo out; echo err >&2; exit 7'` in task main/0",
        "alice ran `wc -c` in task main/0",
        "alice ran `printf '%s|' '$HOME' 'a b' ';echo x' --task` in task main/0",
    ]


def test_a_ctrl_c_or_a_lost_client_ends_the_command_in_the_task(running: Running) -> None:
    def sleeping(seconds: str) -> bool:
        return running.yard("exec", str(running.job), "--", "pgrep", "-fx", f"sleep {seconds}").returncode == 0

    env = {**running.server.env, "TRAINYARD_TOKEN": running.alice}
    for seconds, how in (("321", signal.SIGINT), ("322", signal.SIGKILL)):
        client = subprocess.Popen([sys.executable, "-m", "trainyard.cli.main", "exec", str(running.job), "--",
                                   "sleep", seconds], env=env, stdin=subprocess.DEVNULL)
        try:
            wait_until(lambda seconds=seconds: sleeping(seconds), timeout=30, what=f"sleep {seconds} to start")
            client.send_signal(how)  # Ctrl-C: SIGINT for the command; SIGKILL: the client is gone
            code = client.wait(timeout=scaled(30))
        finally:
            client.kill()
        assert code == (130 if how == signal.SIGINT else -signal.SIGKILL)
        wait_until(lambda seconds=seconds: not sleeping(seconds), timeout=30, what=f"sleep {seconds} to end")


def test_the_exec_websocket_speaks_its_protocol_and_refuses_others(running: Running) -> None:
    url = f"ws://127.0.0.1:{running.server.port}/api/v1/jobs/{running.job}/tasks/main/0/exec"
    with connect(url, additional_headers={"Authorization": f"Bearer {running.alice}"}, open_timeout=scaled(10)) as ws:
        ws.send(json.dumps({"argv": ["sh", "-c", "read line; echo got $line; echo oops >&2; exit 5"]}))
        ws.send(b"hello\n")
        frames = []
        while not (frames and isinstance(frames[-1], str)):
            frames.append(ws.recv(timeout=scaled(20)))
    output = b"".join(f for f in frames if isinstance(f, bytes) and f[0] == 1)
    errors = b"".join(f for f in frames if isinstance(f, bytes) and f[0] == 2)
    assert (output, errors, json.loads(frames[-1])) == (b"\x01got hello\n", b"\x02oops\n", {"exit": 5})

    with connect(url, additional_headers={"Authorization": f"Bearer {running.alice}"}, open_timeout=scaled(10)) as ws:
        ws.send(json.dumps({"argv": "ls", "tty": False}))
        assert json.loads(ws.recv(timeout=scaled(10))) == {
            "error": "argv must be a list of strings (empty: the task's shell)"}
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=scaled(10))
        assert ws.close_code == 4400

    for token, status in ((running.bob, "404"), ("not-a-token", "401")):
        with pytest.raises(Exception) as refused:
            connect(url, additional_headers={"Authorization": f"Bearer {token}"}, open_timeout=scaled(10))
        assert status in str(refused.value)


CONTAINER_JOB = """
name: boxed
image: {image}
taskRoles:
  main:
    resourcePerInstance: {{cpu: 0.5, memoryMB: 256}}
    commands:
      - echo task-only > /tmp/only-in-the-container
      - {says}
      - exec sleep 600
"""


@needs_podman
def test_yard_exec_runs_in_the_tasks_container(server: Server, image: str) -> None:
    running = Running(server, CONTAINER_JOB.format(image=image, says=SAYS))
    job = str(running.job)
    said = running.yard("exec", job, "--", "sh", "-c", SAYS)
    assert said.returncode == 0, said.stderr
    assert said.stdout.strip() == running.said
    assert running.yard("exec", job, "--", "cat", "/tmp/only-in-the-container").stdout == "task-only\n"
    assert "bookworm" in running.yard("exec", job, "--", "cat", "/etc/os-release").stdout
    assert running.yard("exec", job, "--", "cat", stdin="in the box\n").stdout == "in the box\n"
    failed = running.yard("exec", job, "--", "sh", "-c", "echo no >&2; exit 4")
    assert (failed.returncode, failed.stderr) == (4, "no\n")
    refused = running.yard("exec", job, "--", "true", token=running.bob)
    assert refused.returncode != 0 and f"no job {running.job}" in refused.stderr
    assert "alice ran `cat /etc/os-release` in task main/0" in running.events()

    # A client that goes away takes its command with it, though the engine would leave it running.
    def sleeping() -> bool:  # seen from the host, as root
        return subprocess.run(["pgrep", "-fx", "sleep 323"], capture_output=True).returncode == 0

    env = {**server.env, "TRAINYARD_TOKEN": running.alice}
    client = subprocess.Popen([sys.executable, "-m", "trainyard.cli.main", "exec", job, "--", "sleep", "323"],
                              env=env, stdin=subprocess.DEVNULL)
    try:
        wait_until(sleeping, timeout=30, what="sleep 323 to start in the container")
        client.kill()
        client.wait(timeout=scaled(30))
    finally:
        client.kill()
    wait_until(lambda: not sleeping(), timeout=30, what="the server to end the command its client left")

    # A terminal in the container (the engine's exec --tty), of the size asked.
    url = f"ws://127.0.0.1:{server.port}/api/v1/jobs/{job}/tasks/main/0/exec"
    with connect(url, additional_headers={"Authorization": f"Bearer {running.alice}"}, open_timeout=scaled(10)) as ws:
        ws.send(json.dumps({"argv": ["sh", "-c", "tty; stty size; exit 2"], "tty": True, "rows": 30, "cols": 90}))
        frames = []
        while not (frames and isinstance(frames[-1], str)):
            frames.append(ws.recv(timeout=scaled(30)))
    screen = b"".join(f[1:] for f in frames if isinstance(f, bytes)).decode(errors="replace")
    assert "/dev/pts/" in screen and "30 90" in screen, screen
    assert json.loads(frames[-1]) == {"exit": 2}


class Tmux:
    """A terminal a person would type into: a tmux session of its own, read as its screen."""

    def __init__(self, socket: str, env: dict[str, str]) -> None:
        self.base = ["tmux", "-L", socket, "-f", "/dev/null"]
        self.env = env

    def run(self, *args: str) -> str:
        return subprocess.run([*self.base, *args], env=self.env, capture_output=True, text=True, check=True,
                              timeout=scaled(10)).stdout

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "s")

    def type(self, *keys: str) -> None:
        self.run("send-keys", "-t", "s", *keys)

    def shows(self, text: str, what: str) -> None:
        try:
            wait_until(lambda: text in self.screen(), timeout=20, what=what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the screen:\n{self.screen()}") from None


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")
def test_yard_shell_is_a_terminal_in_the_task_as_a_person_types_into_it(running: Running, tmp_path: Path) -> None:
    status = tmp_path / "status"
    env = {**running.server.env, "TRAINYARD_TOKEN": running.alice, "TERM": "xterm-256color"}
    tmux = Tmux(f"yard-shell-{uuid.uuid4().hex[:8]}", env)
    yard = shlex.join([sys.executable, "-m", "trainyard.cli.main", "shell", str(running.job)])
    tmux.run("new-session", "-d", "-s", "s", "-x", "120", "-y", "40", f"{yard}; echo $? > {status}")
    try:
        # As a person would: wait for the shell's prompt before typing (bash drops what came before).
        wait_until(lambda: tmux.screen().rstrip().endswith("$"), timeout=20, what="the shell's first prompt")
        tmux.type("PS1='re''ady> '", "Enter")  # typed, it does not read as the prompt
        tmux.shows("\nready>", "the shell's prompt")
        tmux.type("tty; echo gpus=$CUDA_VISIBLE_DEVICES; pwd", "Enter")
        tmux.shows("gpus=0", "the task's GPUs")
        screen = tmux.screen()
        assert "/dev/pts/" in screen and "not a tty" not in screen
        assert running.said.split()[1].removeprefix("pwd=") in screen  # the task's work dir

        tmux.run("resize-window", "-t", "s", "-x", "100", "-y", "30")
        tmux.type("clear; stty size", "Enter")
        tmux.shows("30 100", "the remote terminal resized to the window")

        tmux.type("clear; sleep 100", "Enter")
        # Seen from a second command in the task (its sandbox shares the shell's processes).
        wait_until(lambda: running.yard("exec", str(running.job), "--", "pgrep", "-fx", "sleep 100").returncode == 0,
                   timeout=20, what="the remote sleep to start")
        tmux.type("C-c")
        tmux.shows("^C", "the remote terminal to echo Ctrl-C")
        tmux.type("echo slept=$?", "Enter")
        tmux.shows("slept=130", "Ctrl-C to have interrupted the remote sleep (128 + SIGINT)")
        assert running.yard("exec", str(running.job), "--", "pgrep", "-fx", "sleep 100").returncode == 1

        tmux.type("exit 3", "Enter")
        wait_until(status.exists, timeout=20, what="yard shell to exit with the shell")
        assert status.read_text().strip() == "3"
    finally:
        subprocess.run([*tmux.base, "kill-server"], env=env, capture_output=True, timeout=scaled(10))
    assert running.events()[0] == "alice opened a shell in task main/0"
