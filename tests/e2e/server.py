"""A real ``yard up`` process for end-to-end tests: a port from the kernel, a temporary home.

The server binds port 0 and says which port it got (``yard up --port 0``): no test picks a
port by binding and releasing one, which another process could take in between. A restart
(``Server.start`` again) asks for the port it had, which the tests' clients hold.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest
from deadlines import scaled

from trainyard.backends.local.isolation import DEFAULT_WORK_ROOT as WORK_ROOT
from trainyard.client import Client, TrainyardError
from trainyard.schemas.jobs import JobSummary


def wait_until(condition, timeout: float = 20.0, interval: float = 0.05, what: str = "condition"):
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds,
    stretched by ``TRAINYARD_TEST_TIME_FACTOR`` (``tests/deadlines.py``)."""
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


# Outside /tmp, /var/tmp and the server's home, which tasks do not see.
GATES_BASE = Path("/var/lib/trainyard-e2e") if os.geteuid() == 0 else Path.home() / ".cache" / "trainyard-e2e"


def shared_folder(prefix: str, mode: int = 0o1777) -> Path:
    """A new folder the test and its jobs' tasks both reach (under ``GATES_BASE``), its
    permissions ``mode``; the caller removes it."""
    GATES_BASE.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=GATES_BASE))
    folder.chmod(mode)
    return folder


SERVING = re.compile(rb"Trainyard serving on http://[^ ]+:(\d+) ")


@dataclass
class Server:
    home: Path
    port: int  # 0 until started: then the port the kernel gave it
    database_url: str | None
    gpus: int
    extra_args: tuple[str, ...] = ()
    process: subprocess.Popen | None = None
    prefix: tuple[str, ...] = ()  # e.g. setpriv's argv, to run the server as another user
    python: str = sys.executable  # one that user can run, with trainyard installed
    extra_env: tuple[tuple[str, str], ...] = ()  # settings for the server, e.g. TRAINYARD_SESSION_PYTHON

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINYARD_")}
        env["TRAINYARD_HOME"] = str(self.home)
        if self.database_url:
            env["TRAINYARD_DATABASE_URL"] = self.database_url
        # Retries at once: the back-off's waits (10 s, doubling) are the controller's tests'
        # (tests/controller/test_retry_backoff.py); here they would only add to the suite's time.
        env["TRAINYARD_JOB_RETRY_BACKOFF_SECONDS"] = "0"
        env.update(self.extra_env)
        return env

    def start(self) -> None:
        log = open(self.home / "server.log", "ab")
        earlier = log.tell()  # a restart appends to the log of the runs before it
        self.process = subprocess.Popen(
            [*self.prefix, self.python, "-m", "trainyard.cli.main", "up", "--port", str(self.port),
             "--local-gpus", str(self.gpus), "--local-cpus", "8", "--local-memory-mb", "16384",
             *self.extra_args],
            env=self.env, stdout=log, stderr=subprocess.STDOUT,
        )
        if self.port == 0:
            def serving() -> int | None:
                assert self.process.poll() is None, "yard up exited:\n" + self.log()
                with open(self.home / "server.log", "rb") as written:
                    written.seek(earlier)
                    found = SERVING.search(written.read())
                return int(found[1]) if found else None
            self.port = wait_until(serving, timeout=30, what="the server to say which port it got")

        def healthy() -> bool:
            assert self.process.poll() is None, "yard up exited:\n" + self.log()
            try:
                return httpx.get(self.url + "/api/v1/healthz", timeout=scaled(1)).status_code == 200
            except httpx.TransportError:
                return False
        wait_until(healthy, timeout=30, what="the server to answer /healthz")

    def kill9(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(scaled(10))
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log(self) -> str:
        return (self.home / "server.log").read_text(errors="replace")

    def admin(self) -> Client:
        import json

        data = json.loads((self.home / "client.json").read_text())
        return Client(data["url"], data["token"])

    def add_users(self, *names: str) -> dict[str, str]:
        """Make each user that is not there yet (on a shared server a test before may have
        made it), as the admin, and a new token for each: the tokens by name."""
        admin = self.admin()
        for name in names:
            ensure_user(admin, name)
        return {name: admin.create_token(user=name).token for name in names}

    def yard(self, *args: str, input: str | None = None, token: str | None = None) -> subprocess.CompletedProcess:
        env = self.env
        if token is not None:
            env["TRAINYARD_TOKEN"] = token
        return subprocess.run([sys.executable, "-m", "trainyard.cli.main", *args], env=env,
                              capture_output=True, text=True, input=input, timeout=scaled(60))

    def kill_tasks(self) -> None:
        """End every task process this server's home started (they outlive the server).

        Tasks under task accounts run in work dirs outside the home: those too.
        """
        roots = [self.home, *(WORK_ROOT / cluster.name for cluster in (self.home / "local").glob("*"))]
        # Containers first, while their engine can still stop them: killed from outside, a
        # container's processes leave Podman's record of it stuck in "stopping".
        remove_containers_under(roots)
        for root in roots:
            kill_tasks_under(root)

    def remove_work_dirs(self) -> None:
        """Remove this server's trees under the shared work root (its task accounts' work
        dirs, its environments): each server has a cluster id of its own, so a run would
        otherwise leave two trees per server there, and a later test that globs the work
        root would wade through every earlier server's environments."""
        for cluster in (self.home / "local").glob("*"):
            if not cluster.name.endswith("-environments"):
                for tree in (WORK_ROOT / cluster.name, WORK_ROOT / f"{cluster.name}-environments"):
                    shutil.rmtree(tree, ignore_errors=True)


def remove_containers_under(roots: list[Path]) -> None:
    """Remove the containers of tasks under ``roots`` (a mount of theirs is there): killing a
    container task's processes on the host ends its engine client, not the container."""
    if shutil.which("podman") is None:
        return
    ids = subprocess.run(["podman", "ps", "-aq"], capture_output=True, text=True, check=False).stdout.split()
    if not ids:
        return
    found = subprocess.run(["podman", "inspect", "--format", "{{.Id}} {{range .Mounts}}{{.Source}} {{end}}", *ids],
                           capture_output=True, text=True, check=False).stdout
    doomed = [fields[0] for fields in map(str.split, found.splitlines())
              if fields and any(Path(source).is_relative_to(root) for source in fields[1:] for root in roots)]
    if doomed:
        subprocess.run(["podman", "rm", "-f", "-t", "0", *doomed], capture_output=True, check=False)


def kill_tasks_under(path: Path) -> None:
    """Kill the process groups of every process whose command line names ``path``, or that
    works in a directory under it: a task's supervisor and wrapper name it, but what the
    task runs (``sleep 600``) may not, and would outlive the test if only the namers were
    killed — nor may a process that left the task's group (``setsid``), which no stop of
    the group reaches, but it still works in the task's directory."""
    found = subprocess.run(["pgrep", "-f", str(path)], capture_output=True, text=True, check=False).stdout
    pids = {int(pid) for pid in found.split()}
    for proc in psutil.process_iter(["cwd"]):
        cwd = proc.info["cwd"]
        if cwd and Path(cwd).is_relative_to(path):
            pids.add(proc.pid)
    groups = set()
    for pid in pids:
        try:
            groups.add(os.getpgid(pid))
        except ProcessLookupError:
            pass
    groups.discard(os.getpgid(0))  # never the test run's own group
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
    subprocess.run(["pkill", "-KILL", "-f", str(path)], check=False)


def ensure_user(admin: Client, name: str) -> None:
    """Create user ``name`` unless it exists: on a shared server a test before may have made it."""
    if name not in {user.name for user in admin.users()}:
        admin.create_user(name)


UNFINISHED = "WAITING,RUNNING,STOPPING,SUSPENDED"


def unfinished_jobs(admin: Client) -> list[JobSummary]:
    """Every job of every user that has not ended, as an admin sees them (all pages)."""
    found: list[JobSummary] = []
    before = None
    while True:
        page = admin.jobs(state=UNFINISHED, limit=500, before=before)
        found += page.items
        if page.next is None:
            return found
        before = page.next


def clean_slate(server: Server) -> None:
    """Leave ``server`` as idle as a fresh one, for the next test that shares it: stop, as
    the admin, every job that has not ended (WAITING, RUNNING, SUSPENDED), and wait until
    none is left running or stopping and no GPU, CPU or memory of any node is allocated.

    Users, tokens, VCs and ended jobs stay: tests that share a server must not count on
    their absence (tests/e2e/conftest.py says which may share)."""
    admin = server.admin()
    for job in unfinished_jobs(admin):
        if job.state == "STOPPING":
            continue
        try:
            admin.stop(job.id)
        except TrainyardError as exc:
            if exc.status != 409:  # 409: it ended meanwhile
                raise

    def idle() -> bool:
        if unfinished_jobs(admin):
            return False
        return all(node.cpuUsed == 0 and node.memoryUsedMB == 0 and all(g.used == 0 and not g.jobs for g in node.gpus)
                   for node in admin.nodes())

    try:
        wait_until(idle, timeout=90, interval=0.2, what="the shared server to have no unfinished job and no "
                                                        "allocation left")
    except AssertionError as exc:
        left = [(j.id, j.name, j.state) for j in unfinished_jobs(admin)]
        raise AssertionError(f"{exc}; unfinished: {left}; nodes: {admin.nodes()}") from None


@contextmanager
def running_server(home: Path, *, gpus: int, database_url: str | None = None,
                   extra_args: tuple[str, ...] = (), prefix: tuple[str, ...] = (),
                   python: str = sys.executable, extra_env: dict[str, str] | None = None) -> Iterator[Server]:
    """A started server, stopped (and its tasks killed) on exit."""
    srv = Server(home=home, port=0, database_url=database_url, gpus=gpus, extra_args=extra_args,
                 prefix=prefix, python=python, extra_env=tuple((extra_env or {}).items()))
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()
        srv.kill_tasks()
        srv.remove_work_dirs()


def require_default_install() -> None:
    """The default install (``yard up`` as root: per-user task accounts and the bubblewrap
    sandbox): skipped where the tests do not run as root, failed where bubblewrap is missing."""
    if os.geteuid() != 0:
        pytest.skip("the default install (per-user task accounts, the sandbox as root) needs yard up as root")
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed (apt-get install bubblewrap; .ci/run installs it)")


@contextmanager
def default_install(tmp_path_factory: pytest.TempPathFactory, *, gpus: int,
                    extra_env: dict[str, str] | None = None) -> Iterator[Server]:
    """A started ``yard up`` as root (``require_default_install``) in a new home, with its own
    SQLite; stopped, and its tasks killed, at the end. One per test module: each costs 10-15 s."""
    require_default_install()
    with running_server(tmp_path_factory.mktemp("home"), gpus=gpus, extra_env=extra_env) as srv:
        yield srv
