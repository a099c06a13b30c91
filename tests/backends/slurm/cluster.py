"""Helpers for the Slurm tests: our Slurm jobs, and driving the controller until a state."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from e2e.server import Server, wait_until
from sqlalchemy import select

from trainyard.backends.slurm.backend import job_name_prefix
from trainyard.backends.slurm.commands import SlurmCommands
from trainyard.backends.slurm.jobstate import FINAL_STATES
from trainyard.backends.slurm.shares import DEFAULT_ROOT
from trainyard.core.clock import SystemClock
from trainyard.services import jobs as job_service
from trainyard.spec.loading import parse_job
from trainyard.store.events import job_events
from trainyard.store.rows import AttemptRow, JobRow, TaskRow

FINAL = ("SUCCEEDED", "FAILED", "STOPPED")


def our_jobs(slurm: SlurmCommands, prefix: str) -> list[str]:
    """Ids of the Slurm jobs (not yet ended) whose name starts with ``prefix``."""
    out = slurm.run(["squeue", "--noheader", "--format=%F %j"]).stdout
    rows = [line.split() for line in out.splitlines()]
    return sorted({row[0] for row in rows if len(row) == 2 and row[1].startswith(prefix)})


def cancel_all(slurm: SlurmCommands, prefix: str) -> None:
    for job_id in our_jobs(slurm, prefix):
        slurm.scancel(job_id)
    wait_until(lambda: not our_jobs(slurm, prefix), timeout=30, what=f"Slurm jobs {prefix}* to end")


def ended_slurm_job(slurm: SlurmCommands, job_id: str) -> list[dict[str, str]]:
    """The Slurm records of a job once every component has ended (a task's own exit file
    comes a moment before Slurm's COMPLETING turns into a final state)."""
    return wait_until(lambda: (records := slurm_job(slurm, job_id)) and all(
        r["JobState"] in FINAL_STATES for r in records) and records, timeout=30, what=f"Slurm job {job_id} to end")


def slurm_job(slurm: SlurmCommands, job_id: str) -> list[dict[str, str]]:
    """The Slurm records (one per hetjob component) of a job, while Slurm remembers it."""
    return [r for r in slurm.jobs() if (r.get("HetJobId") or r.get("JobId")) == job_id]


def node_addr(slurm: SlurmCommands, node: str) -> str:
    """The address Slurm reaches ``node`` at (``NodeAddr``): on the dev cluster, the node's own
    address in its network namespace (``scripts/dev-slurm.sh``), or 127.0.0.1 without them."""
    [record] = [r for r in slurm.nodes() if r["NodeName"] == node]
    return record["NodeAddr"]


def node_argv(slurm: SlurmCommands, node: str, argv: Sequence[str]) -> list[str]:
    """The command line that runs ``argv`` on this machine in ``node``'s network (its slurmd's
    network namespace, found through Slurm's pid file, ``SlurmdPidFile``): what a process on
    that node sees of the network."""
    config = {name.strip(): value.strip() for name, _, value in (
        line.partition(" = ") for line in slurm.run(["scontrol", "show", "config"]).stdout.splitlines())}
    pid = Path(config["SlurmdPidFile"].replace("%n", node)).read_text().strip()
    return ["nsenter", f"--net=/proc/{pid}/ns/net", "--", *argv]


def on_node(slurm: SlurmCommands, node: str, argv: list[str], **options) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` to its end in ``node``'s network (``node_argv``); ``options`` go to
    ``subprocess.run`` (``check``, ``input``, ...)."""
    return subprocess.run(node_argv(slurm, node, argv),
                          **{"capture_output": True, "text": True, "check": True, **options})


def run(argv: list[str]) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def submit(world, text: str) -> int:
    with world.db.session() as s:
        return job_service.submit_job(s, s.merge(world.user), parse_job(text), clock=SystemClock()).id


def only_task(world, job_id: int) -> TaskRow:
    """The task of a one-task job that ran as one attempt. A job retried as a new attempt lost
    the first one to a platform fault (a port another program held on its node, its node
    drained or down, Slurm forgetting its job: on a shared dev cluster, often another run's
    doing): this says which, where ``[task] = ...`` said "too many values to unpack"."""
    with world.db.session() as s:
        attempts = s.scalars(select(AttemptRow).where(AttemptRow.job_id == job_id).order_by(AttemptRow.number)).all()
        runs = [(a.number, a.state, [(t.role, t.index, t.state, t.node, t.message) for t in a.tasks])
                for a in attempts]
        assert len(attempts) == 1 and len(attempts[0].tasks) == 1, f"job {job_id} did not run once, as one task: {runs}"
        return attempts[0].tasks[0]


def drive(world, job_id: int, states=FINAL, timeout: float = 30.0, until=None) -> JobRow:
    """Run controller cycles until the job reaches one of ``states`` (and ``until(job)`` holds)."""
    found: list[JobRow] = []

    def reached() -> bool:
        world.controller.wake()
        world.controller.run_once()
        with world.db.session() as s:
            job = s.get(JobRow, job_id)
            if job.state in states and (until is None or until(job)):
                found.append(job)
                return True
        return False

    try:
        wait_until(reached, timeout=timeout, interval=0.05, what=f"job {job_id} to reach {states}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{explain(world, job_id)}") from None
    return found[0]


def explain(world, job_id: int) -> str:
    """Where a job stands, for a miss's message: the store's job, tasks and events, Slurm's
    queue, and the files of the job's task and submission folders."""
    lines = []
    with world.db.session() as s:
        job = s.get(JobRow, job_id)
        lines.append(f"job: {job.state} attempt {job.attempt} {job.state_message!r}")
        for task in s.scalars(select(TaskRow).where(TaskRow.job_id == job_id).order_by(TaskRow.id)):
            lines.append(f"task {task.role}/{task.index} (attempt row {task.attempt_id}): {task.state} "
                         f"node={task.node} stop_sent={task.stop_sent} exit={task.exit_code} {task.message!r}")
        lines += [f"event {e.kind}: {e.message}" for e in job_events(s, job_id)]
    lines.append("squeue: " + world.slurm.run(["squeue", "--noheader", "--format=%F %j %T %R"]).stdout)
    # The processes of its Slurm steps (the dev cluster's nodes are namespaces of this machine).
    ps = subprocess.run(["ps", "-ww", "-eo", "pid,ppid,pgid,stat,wchan:24,etimes,args"], capture_output=True, text=True)
    lines += [f"ps: {line}" for line in ps.stdout.splitlines()[1:]
              if any(mark in line for mark in ("slurmstepd", "task-runner", "script.sh", "python3 -", "bwrap"))]
    job_dir = world.backend.state_dir / "jobs" / str(job_id)
    for path in sorted(job_dir.rglob("*")) if job_dir.is_dir() else ():
        if path.is_file() and path.stat().st_size < 100_000:
            lines.append(f"{path.relative_to(job_dir)}: {path.read_text(errors='replace')[-1500:]}")
    return "\n".join(lines)


@contextmanager
def slurm_yard_up(slurm: SlurmCommands, home: Path, database_url: str | None = None,
                  extra_env: dict[str, str] | None = None) -> Iterator[Server]:
    """A real ``yard up --backend slurm`` (``e2e.server.Server``) on the dev cluster; on exit
    it is stopped and its Slurm jobs are cancelled (its own only: others' test runs share the
    cluster). ``database_url``: the test's database (SQLite's is the server's own default)."""
    url = None if database_url is None or database_url.startswith("sqlite") else database_url
    srv = Server(home=home, port=0, database_url=url, gpus=0, extra_args=("--backend", "slurm"),
                 extra_env=tuple((extra_env or {}).items()))
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()
        # The server's state directories (one per cluster id; the default place), by their prefix.
        states = (home / "slurm").iterdir() if (home / "slurm").is_dir() else ()
        for state_dir in states:
            cancel_all(slurm, job_name_prefix(state_dir))
            # The MPS daemons' folder the server made (as root with per-user accounts; issue 36).
            shutil.rmtree(Path(DEFAULT_ROOT) / job_name_prefix(state_dir).removeprefix("trainyard-"),
                          ignore_errors=True)
