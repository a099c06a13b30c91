"""The monitoring history behind the API: a job's figures (its owner's or an admin's to see)
and a node's, over a window given as times or durations."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from trainyard.core.durations import parse_duration
from trainyard.core.retention import RetentionTier
from trainyard.monitor.history import NodePoint, TaskPoint, Window, node_history, task_history
from trainyard.schemas.history import (
    GpuPointView,
    JobMetrics,
    NodeMetrics,
    NodePointView,
)
from trainyard.services import jobs as job_service
from trainyard.services.errors import Invalid, NotFound
from trainyard.services.logs import task_named
from trainyard.services.specs import StoredSpecs
from trainyard.store.queries import nodes as node_queries
from trainyard.store.rows import UserRow

DEFAULT_WINDOW = timedelta(hours=1)
LONGEST_WINDOW = timedelta(days=366)


def window(since: str | None, until: str | None, now: datetime) -> Window:
    """The window ``since``..``until``, each a time (ISO 8601, UTC unless it says) or a
    duration before now (``1h``, ``7d``); by default the last hour. 422 naming the field."""
    end = now if until is None else _moment("until", until, now)
    start = end - DEFAULT_WINDOW if since is None else _moment("since", since, now)
    if start >= end:
        raise _invalid("since", f"since ({start.isoformat()}) must be before until ({end.isoformat()})")
    if end - start > LONGEST_WINDOW:
        raise _invalid("since", f"a window is at most {LONGEST_WINDOW.days} days long")
    return Window(start, end, 0)


def _moment(field: str, text: str, now: datetime) -> datetime:
    try:
        return now - timedelta(seconds=parse_duration(text))
    except (ValueError, OverflowError):
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise _invalid(field, f"{field}: {text!r} is neither a time (ISO 8601, e.g. 2026-01-31T12:00:00Z) "
                              "nor a duration before now (e.g. 90m, 1h, 7d)") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=now.tzinfo)


def _invalid(field: str, message: str) -> Invalid:
    return Invalid(message, details=[{"path": field, "message": message}])


def job_metrics(
    session: Session, viewer: UserRow, job_id: int, span: Window, *, task: str | None, specs: StoredSpecs,
    retention: Sequence[RetentionTier], now: datetime,
) -> JobMetrics:
    """A job's figures per task over ``span``: its owner's or an admin's to see (404 for others)."""
    job = job_service.get_job(session, viewer, job_id)
    role, index = task_named(specs.of(job), job_id, task) if task is not None else (None, None)
    return read_job_metrics(session, job_id, span, retention=retention, now=now, role=role, index=index)


def read_job_metrics(
    session: Session, job_id: int, span: Window, *, retention: Sequence[RetentionTier], now: datetime,
    role: str | None = None, index: int | None = None,
) -> JobMetrics:
    """What ``job_metrics`` answers, without asking who may see it."""
    series, step = task_history(session, job_id, span, retention, now, role=role, index=index)
    # One validation of the whole answer (in pydantic's core) rather than one per point: a
    # week's window holds thousands of points.
    return JobMetrics.model_validate({
        "job": job_id, "since": span.since, "until": span.until, "step": step,
        "tasks": [{"role": s.role, "index": s.index, "points": [task_point_fields(p) for p in s.points]}
                  for s in series],
    })


def node_metrics(
    session: Session, name: str, span: Window, *, retention: Sequence[RetentionTier], now: datetime
) -> NodeMetrics:
    """A node's own figures over ``span``. They name no job or user, so any signed-in user may
    see them, as ``GET /nodes`` shows every user what each node has allocated."""
    if node_queries.node_named(session, name) is None:
        raise NotFound(f"no node {name!r}")
    points, step = node_history(session, name, span, retention, now)
    return NodeMetrics(node=name, since=span.since, until=span.until, step=step,
                       points=[node_point_view(p) for p in points])


def task_point_fields(point: TaskPoint) -> dict[str, Any]:
    """A point as ``TaskPointView``'s fields."""
    return {
        "at": point.at, "cpuCores": point.cpu_cores, "memoryMB": point.memory_mb, "gpusHeld": point.gpus_held,
        "gpuUtilPct": point.gpu_util_pct, "gpuMemoryMB": point.gpu_memory_mb,
        "diskReadBytesPerSecond": point.disk_read_bytes_per_s, "diskWriteBytesPerSecond": point.disk_write_bytes_per_s,
    }


def node_point_view(point: NodePoint) -> NodePointView:
    return NodePointView(
        at=point.at, cpuPct=point.cpu_pct, load1=point.load1, memoryUsedMB=point.memory_used_mb,
        memoryTotalMB=point.memory_total_mb, diskUsedPct=point.disk_used_pct,
        netRxBytesPerSecond=point.net_rx_bytes_per_s, netTxBytesPerSecond=point.net_tx_bytes_per_s,
        gpus=[gpu_point_view(g) for g in point.gpus],
    )


def gpu_point_view(gpu: dict[str, Any]) -> GpuPointView:
    return GpuPointView(
        index=gpu["index"], model=gpu.get("model", ""), utilPct=gpu.get("util_pct"),
        memoryUsedMB=gpu.get("memory_used_mb"), memoryTotalMB=gpu.get("memory_total_mb"),
        temperatureC=gpu.get("temperature_c"), powerW=gpu.get("power_w"), eccErrors=gpu.get("ecc_errors"),
        simulated=bool(gpu.get("simulated", False)), healthy=bool(gpu.get("healthy", True)),
    )
