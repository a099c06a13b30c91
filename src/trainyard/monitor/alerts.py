"""Alert rules: what each rule watches, its defaults, and its pure evaluation over facts.

The controller reads the facts from the store (``services/alerts.py``) and calls
``evaluate`` every ``alert_interval_seconds``; the rules' thresholds and enablement are
rows an admin changes at any time (``alert_rules``), read again at each evaluation, so a
change needs no restart. ``prometheus_rules`` writes the same rules, with the same
thresholds, as a Prometheus alerting-rules file for sites that run Alertmanager.

A utilisation that was not measured (a simulated GPU: ``None``, "n/a") never counts as
low: the idle-GPU rule judges only jobs with measured utilisation in its window.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

import yaml


class RuleName(StrEnum):
    LONG_RUNNING_JOB = "long-running-job"
    IDLE_GPU_JOB = "idle-gpu-job"
    NODE_UNHEALTHY = "node-unhealthy"
    DISK_FULL = "disk-full"
    LONG_WAITING_JOB = "long-waiting-job"


@dataclass(frozen=True)
class RuleDefinition:
    name: RuleName
    subject: str  # "job" or "node"
    severity: str  # "warning" or "critical", as Alertmanager routes them
    summary: str
    defaults: Mapping[str, float]  # every parameter the rule takes, with its default
    may_cordon: bool = False  # a node rule whose firing may cordon the node
    # Parameters whose default grows with the monitoring interval: at least this many
    # intervals (``rule_defaults``), and never less than the fixed default above.
    per_monitor_interval: Mapping[str, float] = field(default_factory=dict)


RULES: dict[str, RuleDefinition] = {
    d.name: d
    for d in (
        RuleDefinition(RuleName.LONG_RUNNING_JOB, "job", "warning",
                       "job running longer than `days` days", {"days": 5.0}),
        RuleDefinition(RuleName.IDLE_GPU_JOB, "job", "warning",
                       "job holding GPUs with average utilisation under `utilization_pct` % over "
                       "`window_minutes` minutes (never on n/a utilisation: simulated GPUs)",
                       {"utilization_pct": 10.0, "window_minutes": 30.0}),
        RuleDefinition(RuleName.NODE_UNHEALTHY, "node", "critical",
                       "node unschedulable or not sampled for `stale_seconds` s, a GPU missing or "
                       "unhealthy, or at least `ecc_errors` uncorrected ECC errors on a GPU "
                       "(`stale_seconds` defaults to 5 monitoring intervals, at least 300 s)",
                       # Five rounds missed, not one: a late round (a slow backend or database,
                       # Slurm's own node polling) is not a sick node.
                       {"stale_seconds": 300.0, "ecc_errors": 1.0}, may_cordon=True,
                       per_monitor_interval={"stale_seconds": 5.0}),
        RuleDefinition(RuleName.DISK_FULL, "node", "warning",
                       "disk holding Trainyard's state over `used_pct` % full", {"used_pct": 80.0}),
        RuleDefinition(RuleName.LONG_WAITING_JOB, "job", "warning",
                       "job waiting longer than `minutes` minutes (with its pending reason)", {"minutes": 30.0}),
    )
}


@dataclass(frozen=True)
class RuleSettings:
    """A rule as it runs now: the admin's settings over the defaults."""

    name: str
    enabled: bool
    params: Mapping[str, float]
    cordon: bool = False


def rule_defaults(name: str, monitor_interval_seconds: float) -> dict[str, float]:
    """Rule ``name``'s parameters as they are when no admin set them, with samples taken
    every ``monitor_interval_seconds``."""
    definition = RULES[name]
    return {key: max(value, definition.per_monitor_interval.get(key, 0.0) * monitor_interval_seconds)
            for key, value in definition.defaults.items()}


def default_settings(name: str, monitor_interval_seconds: float) -> RuleSettings:
    return RuleSettings(name, True, rule_defaults(name, monitor_interval_seconds))


def check_params(name: str, params: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What is wrong with ``params`` for rule ``name``, as (field path, message) pairs."""
    problems = []
    defaults = RULES[name].defaults
    for key, value in params.items():
        if key not in defaults:
            problems.append((f"params.{key}", f"rule {name} has no parameter {key!r}; it takes "
                                              + ", ".join(sorted(defaults))))
        elif isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e9:
            problems.append((f"params.{key}", f"must be a positive number, not {value!r}"))
    return problems


# The facts the rules judge, read from the store at one moment.

@dataclass(frozen=True)
class RunningJob:
    job_id: int
    user: str
    vc: str
    started_at: datetime
    gpus: float  # GPUs its unfinished tasks hold
    gpu_util_pct: float | None = None  # mean over the idle rule's window; None: n/a or no sample


@dataclass(frozen=True)
class WaitingJob:
    job_id: int
    user: str
    vc: str
    waiting_since: datetime
    pending: str  # its pending reason in words ("" when the scheduler has not said yet)


@dataclass(frozen=True)
class NodeFacts:
    name: str
    schedulable: bool  # as the backend reports it (not the admin's cordon)
    cordoned: bool
    gpu_indices: tuple[int, ...]  # the inventory's
    sampled_at: datetime | None = None  # the newest sample; None: not sampled lately
    disk_used_pct: float | None = None
    gpus: tuple[Mapping[str, Any], ...] = ()  # the newest sample's GPUs (core.metrics.GpuSample fields)


@dataclass(frozen=True)
class Facts:
    now: datetime
    running: Sequence[RunningJob] = ()
    waiting: Sequence[WaitingJob] = ()
    nodes: Sequence[NodeFacts] = ()


@dataclass(frozen=True)
class Finding:
    """A rule that holds now about one subject."""

    rule: str
    subject: str  # "job:7", "node:gpu-3"
    message: str
    job_id: int | None = None
    node: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


def evaluate(facts: Facts, rules: Mapping[str, RuleSettings]) -> list[Finding]:
    """Every finding of the enabled rules (``rules``: every rule, with all its parameters),
    in rule order then by subject."""
    findings: list[Finding] = []
    for name, judge in _JUDGES.items():
        settings = rules[name]
        if settings.enabled:
            findings.extend(judge(facts, settings.params))
    return findings


# What in an alert's text only moves while it fires (durations, percentages, counts): every
# number but a GPU's index. Text that differs elsewhere tells of another problem.
_MOVING_FIGURE = re.compile(r"(?<!GPU )\d+(?:\.\d+)?")


def same_problem(message: str, other: str) -> bool:
    """Whether two texts of one alert tell of the same problem, their figures aside
    ("GPU 0 has 2 uncorrected ECC errors" and "... 3 ..." do; "GPU 1 missing" and
    "GPU 1 missing; GPU 0 not answering" do not)."""
    return _MOVING_FIGURE.sub("#", message) == _MOVING_FIGURE.sub("#", other)


def _job(rule: str, job_id: int, user: str, vc: str, message: str) -> Finding:
    return Finding(rule, f"job:{job_id}", message, job_id=job_id,
                   labels={"job": str(job_id), "user": user, "vc": vc})


def _long_running(facts: Facts, params: Mapping[str, float]) -> list[Finding]:
    limit = timedelta(days=params["days"])
    return [
        _job(RuleName.LONG_RUNNING_JOB, j.job_id, j.user, j.vc,
             f"job {j.job_id} has run for {_duration(facts.now - j.started_at)}, longer than {params['days']:g} days")
        for j in facts.running
        if facts.now - j.started_at > limit
    ]


def _idle_gpus(facts: Facts, params: Mapping[str, float]) -> list[Finding]:
    window = timedelta(minutes=params["window_minutes"])
    return [
        _job(RuleName.IDLE_GPU_JOB, j.job_id, j.user, j.vc,
             f"job {j.job_id} holds {j.gpus:g} GPU(s) but used {j.gpu_util_pct:.1f} % of them on average "
             f"over the last {params['window_minutes']:g} minutes (under {params['utilization_pct']:g} %)")
        for j in facts.running
        # A job younger than the window is not judged on part of it; n/a is never low.
        if j.gpus > 0 and j.gpu_util_pct is not None and facts.now - j.started_at >= window
        and j.gpu_util_pct < params["utilization_pct"]
    ]


def _long_waiting(facts: Facts, params: Mapping[str, float]) -> list[Finding]:
    limit = timedelta(minutes=params["minutes"])
    return [
        _job(RuleName.LONG_WAITING_JOB, j.job_id, j.user, j.vc,
             f"job {j.job_id} has waited {_duration(facts.now - j.waiting_since)}: "
             f"{j.pending or 'reason not known yet'}")
        for j in facts.waiting
        if facts.now - j.waiting_since > limit
    ]


def _node_problems(node: NodeFacts, now: datetime, params: Mapping[str, float]) -> list[str]:
    problems = []
    if not node.schedulable:
        problems.append("the backend reports it down or unschedulable")
    if node.sampled_at is None or now - node.sampled_at > timedelta(seconds=params["stale_seconds"]):
        problems.append(f"not sampled for over {params['stale_seconds']:g} s")
        return problems  # the old sample's GPUs say nothing about now
    # A sample that lists no GPU at all says nothing about them (Slurm's node figures carry none).
    seen = {int(g["index"]) for g in node.gpus}
    missing = [i for i in node.gpu_indices if i not in seen] if node.gpus else []
    problems.extend(f"GPU {i} missing" for i in missing)
    for gpu in node.gpus:
        if not gpu.get("healthy", True):
            problems.append(f"GPU {gpu['index']} not answering")
        ecc = gpu.get("ecc_errors")
        if ecc is not None and ecc >= params["ecc_errors"]:
            problems.append(f"GPU {gpu['index']} has {ecc} uncorrected ECC error(s)")
    return problems


def _unhealthy_nodes(facts: Facts, params: Mapping[str, float]) -> list[Finding]:
    findings = []
    for node in facts.nodes:
        problems = _node_problems(node, facts.now, params)
        if problems:
            findings.append(Finding(RuleName.NODE_UNHEALTHY, f"node:{node.name}",
                                    f"node {node.name}: " + "; ".join(problems), node=node.name,
                                    labels={"node": node.name}))
    return findings


def _full_disks(facts: Facts, params: Mapping[str, float]) -> list[Finding]:
    return [
        Finding(RuleName.DISK_FULL, f"node:{n.name}",
                f"node {n.name}: disk {n.disk_used_pct:.1f} % full (over {params['used_pct']:g} %)",
                node=n.name, labels={"node": n.name})
        for n in facts.nodes
        if n.disk_used_pct is not None and n.disk_used_pct > params["used_pct"]
    ]


_JUDGES = {
    RuleName.LONG_RUNNING_JOB: _long_running,
    RuleName.IDLE_GPU_JOB: _idle_gpus,
    RuleName.NODE_UNHEALTHY: _unhealthy_nodes,
    RuleName.DISK_FULL: _full_disks,
    RuleName.LONG_WAITING_JOB: _long_waiting,
}


def _duration(delta: timedelta) -> str:
    minutes = int(delta.total_seconds() // 60)
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    return (f"{days}d " if days else "") + f"{hours}h{minutes:02d}m"


# The same rules over the exported metrics (names in docs/architecture.md, "Monitoring").

def _prometheus_expressions(name: str, p: Mapping[str, float]) -> list[tuple[str, str, str]]:
    """(alert name, PromQL expression, description) for rule ``name`` with parameters ``p``."""
    if name == RuleName.LONG_RUNNING_JOB:
        return [("TrainyardLongRunningJob", f"trainyard_job_running_seconds > {p['days'] * 86400:g}",
                 "Job {{ $labels.job }} of {{ $labels.user }} has run for {{ $value | humanizeDuration }}.")]
    if name == RuleName.IDLE_GPU_JOB:
        ratio, window = p["utilization_pct"] / 100, f"{int(p['window_minutes'])}m"
        return [("TrainyardIdleGpuJob",
                 f"avg by (job, user, vc) (avg_over_time(trainyard_task_gpu_utilization_ratio[{window}])) < {ratio:g}",
                 "Job {{ $labels.job }} of {{ $labels.user }} uses {{ $value | humanizePercentage }} of its GPUs.")]
    if name == RuleName.NODE_UNHEALTHY:
        return [
            ("TrainyardNodeDown", "trainyard_node_up == 0", "Node {{ $labels.node }} is down or not sampled."),
            ("TrainyardGpuEccErrors", f"trainyard_gpu_ecc_uncorrected_errors >= {p['ecc_errors']:g}",
             "GPU {{ $labels.gpu }} of node {{ $labels.node }} reports uncorrected ECC errors."),
            # Simulated GPUs report no memory figure, so their nodes never match the right side.
            ("TrainyardGpuMissing",
             "sum by (node) (trainyard_gpus_total) > count by (node) (trainyard_gpu_memory_used_bytes)",
             "Node {{ $labels.node }} reports fewer GPUs than its inventory."),
        ]
    if name == RuleName.DISK_FULL:
        return [("TrainyardDiskFull", f"trainyard_node_disk_used_ratio > {p['used_pct'] / 100:g}",
                 "Node {{ $labels.node }}'s disk is {{ $value | humanizePercentage }} full.")]
    if name == RuleName.LONG_WAITING_JOB:
        return [("TrainyardLongWaitingJob", f"trainyard_queue_oldest_wait_seconds > {p['minutes'] * 60:g}",
                 "A job in VC {{ $labels.vc }} has waited {{ $value | humanizeDuration }}; `yard alerts` says why.")]
    raise ValueError(f"no Prometheus form for rule {name}")


def prometheus_rules(rules: Mapping[str, RuleSettings]) -> str:
    """The enabled rules (``rules``: every rule), with their current thresholds, as a
    Prometheus rules file (YAML)."""
    alerts = []
    for name, definition in RULES.items():
        settings = rules[name]
        if not settings.enabled:
            continue
        for alert, expr, description in _prometheus_expressions(name, settings.params):
            alerts.append({
                "alert": alert,
                "expr": expr,
                "for": "1m",
                "labels": {"severity": definition.severity, "trainyard_rule": str(name)},
                "annotations": {"summary": f"Trainyard {name}", "description": description},
            })
    return yaml.safe_dump({"groups": [{"name": "trainyard", "rules": alerts}]}, sort_keys=False, width=1000)
