"""Shared helpers for the benchmarks: run a real ``yard up`` server in a subprocess.

Nothing is measured here. ``yard_server()`` is a context manager that:

* makes a temporary ``TRAINYARD_HOME`` (or uses the one given),
* starts ``yard up --port <free port> [--local-gpus N] [extra args]`` as a subprocess
  (extra environment such as ``TRAINYARD_DATABASE_URL`` can be passed),
* polls ``GET /api/v1/healthz`` until it answers (with a deadline), and
* yields a :class:`Server` (url, token, home, a ready ``trainyard.client.Client``).

On exit it stops every job still active, stops the server (SIGINT, then SIGTERM, then
SIGKILL), and kills whatever is left of the jobs' processes: the local backend runs each
task under a detached supervisor (its own session), so stopping the server never stops
them. Supervisors carry their task directory (under the temporary home) on their command
line; task process groups are recorded in each task's ``pid.json``.

Run ``python benchmarks/common.py`` for a smoke test (starts a server, prints healthz).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
if str(REPO / "src") not in sys.path:  # run from a checkout even when not installed
    sys.path.insert(0, str(REPO / "src"))

from trainyard.client import Client  # noqa: E402

HEALTHZ = "/api/v1/healthz"


def yard_command() -> list[str]:
    """How to run the ``yard`` CLI: the console script installed beside this Python (not a
    pyenv-style shim, which adds ~50 ms per call), else one on PATH, else ``python -m``."""
    candidate = Path(sys.executable).with_name("yard")
    exe = str(candidate) if candidate.exists() else shutil.which("yard")
    return [exe] if exe else [sys.executable, "-m", "trainyard.cli.main"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    token: str
    home: Path
    port: int
    process: subprocess.Popen
    client: Client
    log_path: Path

    @property
    def env(self) -> dict[str, str]:
        """Environment for a ``yard`` CLI subprocess talking to this server."""
        env = dict(os.environ)
        env.pop("TRAINYARD_URL", None)
        env.pop("TRAINYARD_TOKEN", None)
        env["TRAINYARD_HOME"] = str(self.home)
        return env

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


def wait_healthy(url: str, process: subprocess.Popen, deadline_s: float, log_path: Path) -> None:
    deadline = time.monotonic() + deadline_s
    last_error: Exception | None = None
    with httpx.Client(timeout=2.0) as http:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(
                    f"`yard up` exited with status {process.returncode} before answering; log:\n"
                    + log_path.read_text(errors="replace")[-4000:]
                )
            try:
                if http.get(url + HEALTHZ).status_code == 200:
                    return
            except httpx.TransportError as exc:
                last_error = exc
            time.sleep(0.05)
    raise TimeoutError(f"`yard up` did not answer {HEALTHZ} within {deadline_s:g} s ({last_error}); log:\n"
                       + log_path.read_text(errors="replace")[-4000:])


def _read_client_file(home: Path, deadline_s: float = 10.0) -> dict:
    path = home / "client.json"
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            data = json.loads(path.read_text())
            if data.get("token"):
                return data
        except (OSError, json.JSONDecodeError):
            pass
        time.sleep(0.02)
    raise TimeoutError(f"{path} has no token")


def stop_active_jobs(client: Client) -> None:
    """Ask the server to stop every WAITING/RUNNING job (best effort, paged)."""
    with contextlib.suppress(Exception):
        before = None
        while True:
            page = client.jobs(state="WAITING,RUNNING", limit=500, before=before)
            for job in page["items"]:
                with contextlib.suppress(Exception):
                    client.stop(job["id"])
            before = page["next"]
            if before is None:
                break


def _proc_cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def task_pid_files(home: Path, job_id: int | str = "*") -> list[Path]:
    """The ``pid.json`` of every task of ``job_id`` (all jobs by default) that the local
    backend under ``home`` ran. Its state is ``home/local/<cluster>/tasks/<job>/<attempt>/
    <role>-<index>-<run>/`` (``api/server.py``): a glob that leaves out ``<cluster>`` finds
    nothing, and a benchmark waiting for a task to appear there waits for ever."""
    return sorted(home.glob(f"local/*/tasks/{job_id}/*/*/pid.json"))


def kill_leftovers(home: Path) -> int:
    """SIGKILL task process groups recorded under ``home`` and supervisors naming ``home``."""
    killed = 0
    home_s = str(home)
    try:  # tasks: the backend's own procfs helpers check the pgid's start time and boot id
        from trainyard.backends.local import procfs
    except Exception:  # noqa: BLE001
        procfs = None
    for pid_file in task_pid_files(home):
        try:
            record = json.loads(pid_file.read_text())
            task = record.get("task")
            if task and procfs is not None:
                if procfs.signal_group(int(task["pgid"]), int(task["start_time"]), signal.SIGKILL,
                                       record.get("boot_id")):
                    killed += 1
        except (OSError, ValueError, KeyError, TypeError):
            continue
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        if home_s in _proc_cmdline(int(name)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(name), signal.SIGKILL)
                killed += 1
    return killed


def _stop_process(process: subprocess.Popen) -> None:
    for sig, wait_s in ((signal.SIGINT, 10.0), (signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        if process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(wait_s)


@contextlib.contextmanager
def yard_server(
    *,
    local_gpus: int | None = 1,
    extra_args: Sequence[str] = (),
    env: dict[str, str] | None = None,
    home: Path | None = None,
    startup_deadline_s: float = 60.0,
    keep_home: bool = False,
    stop_jobs: bool = True,
    command: Sequence[str] | None = None,
) -> Iterator[Server]:
    """Run ``yard up`` until the ``with`` block ends; yields a :class:`Server`.

    ``command`` replaces the ``yard`` executable (e.g. ``["py-spy", "record", ..., "--",
    "yard"]`` or a patched launcher for experiments); ``up --port ...`` is appended to it.
    """
    own_home = home is None
    home = Path(tempfile.mkdtemp(prefix="yard-bench-")) if home is None else Path(home)
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    args = [*(command or yard_command()), "up", "--port", str(port)]
    if local_gpus is not None:
        args += ["--local-gpus", str(local_gpus)]
    args += list(extra_args)
    proc_env = dict(os.environ)
    for key in ("TRAINYARD_URL", "TRAINYARD_TOKEN", "TRAINYARD_PORT", "TRAINYARD_HOST"):
        proc_env.pop(key, None)
    proc_env["TRAINYARD_HOME"] = str(home)
    proc_env.update(env or {})
    log_path = home / "server.log"
    log_file = open(log_path, "ab")
    process = subprocess.Popen(args, env=proc_env, stdout=log_file, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL, cwd=str(home))
    client: Client | None = None
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, process, startup_deadline_s, log_path)
        data = _read_client_file(home)
        client = Client(url, data["token"])
        yield Server(url=url, token=data["token"], home=home, port=port, process=process,
                     client=client, log_path=log_path)
    finally:
        if client is not None:
            if stop_jobs:
                stop_active_jobs(client)
            client.close()
        _stop_process(process)
        log_file.close()
        kill_leftovers(home)
        if own_home and not keep_home:
            shutil.rmtree(home, ignore_errors=True)


@contextlib.contextmanager
def private_schema(url: str | None) -> Iterator[str | None]:
    """A PostgreSQL URL whose tables go to a schema of their own, dropped afterwards, so that
    the benchmark leaves nothing in the database it was given."""
    if url is None:
        yield None
        return
    from sqlalchemy import create_engine, text  # here: the server benchmarks need no SQLAlchemy

    schema = f"bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(url)
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    try:
        yield f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


# --- small statistics helpers shared by the benchmarks ------------------------------------


def process_cpu_seconds(pid: int) -> float:
    """User+system CPU seconds used so far by process ``pid`` (all its threads), from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty sequence."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    rank = max(1, min(len(ordered), round(p / 100 * len(ordered) + 0.5 - 1e-9)))
    return ordered[rank - 1]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ratio_line(name: str, value: float, target: float, *, lower_is_better: bool, unit: str) -> str:
    """One line: value, target, ratio, and whether it meets the target (no assertion)."""
    ratio = value / target if target else float("nan")
    ok = value <= target if lower_is_better else value >= target
    cmp = "<" if lower_is_better else "≥"
    return (f"{name}: {value:.4g} {unit}  (target {cmp} {target:g} {unit}; ratio {ratio:.2f}x of target; "
            f"{'MEETS' if ok else 'MISSES'} target)")


TINY_JOB_YAML = """\
name: {name}
taskRoles:
  w:
    resourcePerInstance: {{gpu: {gpu}, cpu: 0.01, memoryMB: 16}}
    commands: ["{command}"]
"""


def tiny_job_yaml(name: str = "bench", *, gpu: int | float = 0, command: str = "sleep 30") -> str:
    return TINY_JOB_YAML.format(name=name, gpu=gpu, command=command)


def tiny_job_json(name: str = "bench", *, gpu: int | float = 0, command: str = "sleep 30") -> str:
    return json.dumps({
        "name": name,
        "taskRoles": {"w": {"resourcePerInstance": {"gpu": gpu, "cpu": 0.01, "memoryMB": 16},
                            "commands": [command]}},
    })


if __name__ == "__main__":
    t0 = time.perf_counter()
    with yard_server() as server:
        print(f"server up in {time.perf_counter() - t0:.2f} s at {server.url}: {server.client.healthz()}")
    print("stopped; leftovers cleaned")
