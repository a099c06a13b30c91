"""Plain-text rendering of the API's models for the CLI: aligned tables, short times, job detail.

Only presentation lives here; what a field means (which jobs have a pending reason, which
task a log shows) is the server's answer, read from the models.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from trainyard.core.states import JobState

if TYPE_CHECKING:  # for annotations only: each command imports the models it reads (issue 33)
    from pydantic import BaseModel

    from trainyard.schemas.cluster import GpuView, NodeView
    from trainyard.schemas.jobs import JobDetail, JobDirView, JobSummary, SizeView, TaskView


def print_json(data: BaseModel | Sequence[BaseModel]) -> None:
    """The model(s) as the API sent them, keys sorted, for scripts."""
    plain = [d.model_dump(mode="json") for d in data] if isinstance(data, Sequence) else data.model_dump(mode="json")
    json.dump(plain, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(c) if c is not None else "-" for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


def when(moment: datetime | None) -> str:
    """A time as local 'YYYY-MM-DD HH:MM:SS'."""
    if moment is None:
        return "-"
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def duration(start: datetime | None, end: datetime | None) -> str:
    if start is None:
        return "-"
    return seconds_text(((end or datetime.now(UTC)) - start).total_seconds())


def seconds_text(seconds: float | None) -> str:
    """``M:SS`` or ``H:MM:SS``; ``-`` for None."""
    if seconds is None:
        return "-"
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def num(value: float) -> str:
    return f"{value:g}"


def plural(count: int, noun: str) -> str:
    """``1 file``, ``3 files``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def size(count: int) -> str:
    """A byte count in binary units: ``512 B``, ``4.0 KiB``, ``1.3 GiB``."""
    if count < 1024:
        return f"{count} B"
    value = float(count)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024:
            return f"{value:.1f} {unit}"
    return f"{value / 1024:.1f} TiB"


def job_dir_text(job_dir: JobDirView | None, state: JobState) -> str:
    """``12.0 MiB in 3 files`` (+ when it goes once the job has ended), else why there is none."""
    if job_dir is None:
        return "none (removed after the retention, or never made)" if state.is_final else "none yet"
    if job_dir.files == 0 and job_dir.complete:
        text = "empty"  # a directory's own blocks (du counts them) are no content
    else:
        files = "1 file" if job_dir.files == 1 else f"{job_dir.files} files"
        text = ("" if job_dir.complete else "at least ") + f"{size(job_dir.bytes)} in {files}"
    if job_dir.removeAfter is not None:
        text += f"  (removed after {when(job_dir.removeAfter)})"
    return text


def job_status_short(job: JobSummary) -> str:
    """What the ``yard jobs`` table says: a pending reason in a few words with the queue
    place (``QUOTA vision 0/2 free, needs 2, #1``), else the job's message."""
    p = job.pending
    if p is None:
        return job.message
    words = p.short or p.message
    return f"{p.reason} {words}" + (f", #{p.position}" if p.position else "")


def job_status_text(job: JobSummary) -> str:
    """Why a waiting job waits (only a waiting job has a pending reason), else its message."""
    p = job.pending
    if p is None:
        return job.message
    where = f" (#{p.position} in its VC" if p.position else ""
    if p.estimatedStart is not None:
        where += (", " if where else " (") + f"estimated start {when(p.estimatedStart)}"
    return f"{p.reason}: {p.message}{where}{')' if where else ''}"


def _platform_retries(job: JobDetail) -> str:
    """``; platform retries 1 of 3`` once a lost attempt was retried, else nothing."""
    used = job.platformRetriesUsed
    return f"; platform retries {used} of {job.platformRetriesMax}" if used else ""


BORROWED_NOTE = "* on borrowed GPUs, over its VC's quota: reclaimed when the lending VC needs them"


def jobs_table(jobs: Sequence[JobSummary]) -> str:
    """The jobs, one a row; a job on borrowed GPUs has its state starred, with a footnote."""
    rows = [
        [j.id, j.name, j.user, f"{j.state}*" if j.borrowed else j.state, num(j.gpus), j.attempt,
         when(j.submittedAt), seconds_text(j.runtimeSeconds), job_status_short(j)]
        for j in jobs
    ]
    text = table(["ID", "NAME", "USER", "STATE", "GPU", "ATTEMPT", "SUBMITTED", "RUNTIME", "INFO"], rows)
    return text + ("\n" + BORROWED_NOTE if any(j.borrowed for j in jobs) else "")


def borrowed_text(job: JobSummary) -> str:
    """What ``yard job`` says of a job on borrowed GPUs."""
    return (f"runs on borrowed GPUs (over VC {job.vc}'s quota): reclaimed - suspended if it can be, else "
            "requeued - when the lending VC needs them")


def job_detail(job: JobDetail) -> str:
    status = job_status_text(job)
    lines = [
        f"Job {job.id}  {job.name}",
        f"  state:      {job.state}" + (f"  ({status})" if status else ""),
        f"  user:       {job.user}    vc: {job.vc}    priority: {job.priority}",
        f"  submitted:  {when(job.submittedAt)}    started: {when(job.startedAt)}"
        f"    finished: {when(job.finishedAt)}    runtime: {seconds_text(job.runtimeSeconds)}",
        f"  attempt:    {job.attempt}  (retries used {job.retriesUsed} of "
        f"{job.spec.get('jobRetryCount', 0)}{_platform_retries(job)})"
        + (f"    exit code: {job.exitCode}" if job.exitCode is not None else ""),
        f"  job dir:    {job_dir_text(job.jobDir, job.state)}",
    ]
    if job.workdir is not None:
        lines.append(f"  workdir:    {job.workdir.digest[:19]}  {plural(job.workdir.files, 'file')}, "
                     f"{size(job.workdir.sizeBytes)} (sent with the job; each task starts in a copy)")
    if job.borrowed:
        lines.insert(3, f"  borrowed:   {borrowed_text(job)}")
    if job.dependencies:
        lines.append(f"  waits for:  {dependencies_text(job)}")
    for warning in job.warnings:
        lines.append(f"  warning:    {warning}")
    if job.attempts and not job.state.is_final and all(a.number != job.attempt for a in job.attempts):
        # Waiting to resume, or to run again: its next attempt has no tasks yet.
        lines += ["", f"Attempt {job.attempt}: not started yet"]
    for attempt in reversed(job.attempts):
        lines.append("")
        lines.append(f"Attempt {attempt.number}: {attempt.state}" + (" (on borrowed GPUs)" if attempt.borrowed else "")
                     + (f" - {attempt.reason}" if attempt.reason else ""))
        if attempt.sizes:
            lines.append(f"  workers:    {sizes_text(attempt.sizes)}")
        rows = [
            [t.label, t.state, t.node, gpu_devices(t), t.exitCode, t.run, duration(t.startedAt, t.finishedAt),
             ports_text(t.ports), t.message]
            for t in attempt.tasks
        ]
        tasks = table(["TASK", "STATE", "NODE", "GPU DEVICES", "EXIT", "RUN", "RUNTIME", "PORTS", "MESSAGE"], rows)
        lines.extend("  " + line for line in tasks.splitlines())
        lines.extend(_whole_nodes(job, attempt.tasks))
    lines.append("")
    lines.append("Events:")
    for event in job.events:
        lines.append(f"  {when(event.at)}  {event.kind:<18} {event.message}")
    return "\n".join(lines)


def sizes_text(sizes: Sequence[SizeView]) -> str:
    """An elastic job's size over an attempt: ``1 from 2026-11-29 12:00:01, 3 from 12:00:30``
    (the date once, while it stays the same)."""
    shown, day = [], ""
    for size in sizes:
        moment = when(size.at)
        shown.append(f"{size.workers} from {moment if moment[:10] != day else moment[11:]}")
        day = moment[:10]
    return ", ".join(shown)


def dependencies_text(job: JobDetail) -> str:
    """The jobs it waits for (or waited for): ``afterok 12 (RUNNING, waiting), afterany 14 (FAILED, met)``."""
    return ", ".join(f"{d.condition} {d.job} ({d.state or 'no such job'}, {d.status})" for d in job.dependencies)


def gpu_devices(task: TaskView) -> str:
    """Which of its node's GPUs a task holds, by index: ``0,1``; a share of one: ``0 (0.5)``."""
    devices = ",".join(map(str, task.gpus)) or "-"
    return f"{devices} ({num(task.gpu)})" if task.gpus and 0 < task.gpu < 1 else devices


def ports_text(ports: dict[str, list[int]]) -> str:
    """A task's ports by label, as ``yard port-forward`` takes them: ``http:8080 ssh:2222``."""
    return " ".join(f"{label}:{port}" for label, numbers in ports.items() for port in numbers) or "-"


def _whole_nodes(job: JobDetail, tasks: Sequence[TaskView]) -> list[str]:
    """What each task of a whole-node role (``nodes``) received: all of its node."""
    roles = job.spec.get("taskRoles") or {}
    return [
        f"  {t.label} has node {t.node} whole: {num(t.gpu)} GPU, {num(t.cpu)} CPU, {t.memoryMB} MiB"
        for t in tasks
        if isinstance(roles.get(t.role), dict) and roles[t.role].get("nodes") is not None
    ]


def pct(value: float | None) -> str:
    """A percentage, or "n/a" where nothing was measured (a simulated GPU, no fresh sample)."""
    return "n/a" if value is None else f"{value:.0f}%"


def mib(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def gpu_util(gpus: Sequence[GpuView]) -> float | None:
    """The mean utilisation of the GPUs that measured one; None: none did."""
    measured = [g.usage.utilPct for g in gpus if g.usage is not None and g.usage.utilPct is not None]
    return sum(measured) / len(measured) if measured else None


def gpu_memory_in_use(gpus: Sequence[GpuView]) -> int | None:
    measured = [g.usage.memoryUsedMB for g in gpus if g.usage is not None and g.usage.memoryUsedMB is not None]
    return sum(measured) if measured else None


def nodes_table(nodes: Sequence[NodeView]) -> str:
    """Allocation beside use: GPU USED is allocated of total, GPU UTIL what the devices did;
    CPU and MEMORY USED are allocated, CPU % and MEMORY IN USE measured."""
    rows = []
    for n in nodes:
        used = sum(g.used for g in n.gpus)
        model = ", ".join(sorted({g.model for g in n.gpus})) or "-"
        usage = n.usage
        rows.append([
            n.name, "cordoned" if n.cordoned else ("yes" if n.schedulable else "no"),
            f"{num(used)}/{len(n.gpus)}" + (" (simulated)" if n.simulated else ""), pct(gpu_util(n.gpus)), model,
            f"{num(n.cpuUsed)}/{num(n.cpu)}", pct(usage.cpuPct if usage else None), f"{n.memoryUsedMB}/{n.memoryMB}",
            mib(usage.memoryUsedMB if usage else None), pct(usage.diskUsedPct if usage else None),
        ])
    out = table(["NODE", "SCHEDULABLE", "GPU USED", "GPU UTIL", "MODEL", "CPU USED", "CPU %", "MEMORY USED (MiB)",
                 "MEMORY IN USE (MiB)", "DISK"], rows)
    for n in nodes:
        for g in n.gpus:
            if g.jobs:
                jobs = ", ".join(map(str, g.jobs))
                out += f"\n  {n.name} GPU {g.index}: {num(g.used)} used by job(s) {jobs}"
    for n in nodes:
        if n.labels:
            out += f"\n  {n.name} labels: " + ", ".join(f"{k}={v}" for k, v in sorted(n.labels.items()))
    return out
