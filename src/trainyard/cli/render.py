"""Plain-text rendering for the CLI: aligned tables, short times, job detail."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from typing import Any

from trainyard.core.states import JobState


def print_json(data: Any) -> None:
    json.dump(data, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def table(headers: list[str], rows: list[list[Any]]) -> str:
    cells = [[str(c) if c is not None else "-" for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
    return "\n".join(lines)


def when(value: str | None) -> str:
    """An ISO time as local 'YYYY-MM-DD HH:MM:SS'."""
    if not value:
        return "-"
    moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def duration(start: str | None, end: str | None) -> str:
    if not start:
        return "-"
    begin = datetime.fromisoformat(start.replace("Z", "+00:00"))
    finish = datetime.fromisoformat(end.replace("Z", "+00:00")) if end else datetime.now(UTC)
    seconds = int((finish - begin).total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def num(value: float) -> str:
    return f"{value:g}"


def job_status_text(job: dict[str, Any]) -> str:
    if job["state"] == JobState.WAITING and job.get("pending"):
        p = job["pending"]
        where = f" (#{p['position']} in its VC" if p.get("position") else ""
        if p.get("estimatedStart"):
            where += (", " if where else " (") + f"estimated start {when(p['estimatedStart'])}"
        return f"{p['reason']}: {p['message']}{where}{')' if where else ''}"
    return job.get("message") or ""


def _platform_retries(job: dict[str, Any]) -> str:
    """``; platform retries 1 of 3`` once a lost attempt was retried, else nothing."""
    used = job.get("platformRetriesUsed") or 0
    return f"; platform retries {used} of {job.get('platformRetriesMax', '?')}" if used else ""


def jobs_table(jobs: list[dict[str, Any]]) -> str:
    rows = [
        [j["id"], j["name"], j["user"], j["state"], num(j["gpus"]), j["attempt"],
         when(j["submittedAt"]), "-" if j["state"] == JobState.WAITING else duration(j["startedAt"], j["finishedAt"]),
         job_status_text(j)]
        for j in jobs
    ]
    return table(["ID", "NAME", "USER", "STATE", "GPU", "ATTEMPT", "SUBMITTED", "RUNTIME", "INFO"], rows)


def job_detail(job: dict[str, Any]) -> str:
    lines = [
        f"Job {job['id']}  {job['name']}",
        f"  state:      {job['state']}" + (f"  ({job_status_text(job)})" if job_status_text(job) else ""),
        f"  user:       {job['user']}    vc: {job['vc']}    priority: {job['priority']}",
        f"  submitted:  {when(job['submittedAt'])}    started: {when(job['startedAt'])}"
        f"    finished: {when(job['finishedAt'])}",
        f"  attempt:    {job['attempt']}  (retries used {job['retriesUsed']} of "
        f"{job['spec'].get('jobRetryCount', 0)}{_platform_retries(job)})"
        + (f"    exit code: {job['exitCode']}" if job["exitCode"] is not None else ""),
    ]
    for warning in job.get("warnings", []):
        lines.append(f"  warning:    {warning}")
    for attempt in reversed(job["attempts"]):
        lines.append("")
        lines.append(f"Attempt {attempt['number']}: {attempt['state']}"
                     + (f" - {attempt['reason']}" if attempt["reason"] else ""))
        rows = [
            [f"{t['role']}/{t['index']}", t["state"], t["node"], ",".join(map(str, t["gpus"])) or "-",
             t["exitCode"], t["run"], duration(t["startedAt"], t["finishedAt"]), t["message"]]
            for t in attempt["tasks"]
        ]
        tasks = table(["TASK", "STATE", "NODE", "GPUS", "EXIT", "RUN", "RUNTIME", "MESSAGE"], rows)
        lines.extend("  " + line for line in tasks.splitlines())
    lines.append("")
    lines.append("Events:")
    for event in job["events"]:
        lines.append(f"  {when(event['at'])}  {event['kind']:<15} {event['message']}")
    return "\n".join(lines)


def nodes_table(nodes: list[dict[str, Any]]) -> str:
    rows = []
    for n in nodes:
        gpus = n["gpus"]
        used = sum(g["used"] for g in gpus)
        model = ", ".join(sorted({g["model"] for g in gpus})) or "-"
        rows.append([
            n["name"], "cordoned" if n.get("cordoned") else ("yes" if n["schedulable"] else "no"),
            f"{num(used)}/{len(gpus)}" + (" (simulated)" if n["simulated"] else ""), model,
            f"{num(n['cpuUsed'])}/{num(n['cpu'])}", f"{n['memoryUsedMB']}/{n['memoryMB']}",
        ])
    out = table(["NODE", "SCHEDULABLE", "GPU USED", "MODEL", "CPU USED", "MEMORY USED (MiB)"], rows)
    for n in nodes:
        for g in n["gpus"]:
            if g["jobs"]:
                jobs = ", ".join(map(str, g["jobs"]))
                out += f"\n  {n['name']} GPU {g['index']}: {num(g['used'])} used by job(s) {jobs}"
    return out
