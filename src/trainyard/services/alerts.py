"""Alerts behind the API and the controller: the rules' settings (admins change them at any
time, no restart), evaluating them over the store's facts, listing alerts, telling the
receivers, and an admin's one-action stop of a job an alert flagged.

``evaluate`` is one transaction: read facts, judge them (``monitor.alerts.evaluate``),
open an alert for each new finding, resolve those no longer found, cordon a node when its
rule says so. Notifying is I/O and happens outside it (``controller/alerting.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import NamedTuple

from sqlalchemy.orm import Session

from trainyard.core.clock import Clock
from trainyard.monitor import alerts as rules
from trainyard.monitor.notify import Notice
from trainyard.schemas.alerts import AlertRuleUpdate, AlertRuleView, AlertView
from trainyard.services import jobs as job_service
from trainyard.services.errors import Conflict, Forbidden, Invalid, NotFound
from trainyard.store.queries import alerts as alert_queries
from trainyard.store.queries import metrics as metric_queries
from trainyard.store.queries import nodes as node_queries
from trainyard.store.rows import AlertRow, AlertRuleRow, JobRow, UserRow

FIRING, RESOLVED = alert_queries.FIRING, alert_queries.RESOLVED
# Nodes whose newest sample is older than this are not judged stale: they were never
# sampled (no sampler for them), which is not a sign of sickness.
SAMPLE_LOOKBACK = timedelta(days=1)
CORDONED = " (cordoned automatically)"


def rule_settings(session: Session, monitor_interval_seconds: float) -> dict[str, rules.RuleSettings]:
    """Every rule as it runs now: the admins' rows over the defaults (some of which follow
    the monitoring interval, ``rules.rule_defaults``)."""
    rows = alert_queries.rule_rows(session)
    settings = {}
    for name, definition in rules.RULES.items():
        row = rows.get(name)
        if row is None:
            settings[name] = rules.default_settings(name, monitor_interval_seconds)
        else:
            params = {**rules.rule_defaults(name, monitor_interval_seconds),
                      **{k: float(v) for k, v in row.params.items() if k in definition.defaults}}
            settings[name] = rules.RuleSettings(name, row.enabled, params, row.cordon and definition.may_cordon)
    return settings


def rule_views(session: Session, monitor_interval_seconds: float) -> list[AlertRuleView]:
    return [_rule_view(s, monitor_interval_seconds) for s in rule_settings(session, monitor_interval_seconds).values()]


def _rule_view(settings: rules.RuleSettings, monitor_interval_seconds: float) -> AlertRuleView:
    definition = rules.RULES[settings.name]
    return AlertRuleView(name=settings.name, subject=definition.subject, severity=definition.severity,
                         description=definition.summary, enabled=settings.enabled, params=dict(settings.params),
                         defaults=rules.rule_defaults(settings.name, monitor_interval_seconds),
                         cordon=settings.cordon, mayCordon=definition.may_cordon)


def set_rule(
    session: Session, name: str, change: AlertRuleUpdate, clock: Clock, monitor_interval_seconds: float
) -> AlertRuleView:
    """Change a rule's enablement, parameters or cordoning; the next evaluation uses them."""
    definition = rules.RULES.get(name)
    if definition is None:
        raise NotFound(f"no alert rule named {name!r}; the rules are " + ", ".join(rules.RULES))
    problems = rules.check_params(name, change.params or {})
    if change.cordon and not definition.may_cordon:
        problems.append(("cordon", f"rule {name} is not about a node's health, so it cannot cordon"))
    if problems:
        raise Invalid("; ".join(f"{path}: {message}" for path, message in problems),
                      details=[{"path": path, "message": message} for path, message in problems])
    current = rule_settings(session, monitor_interval_seconds)[name]
    row = alert_queries.rule_row(session, name)
    if row is None:
        row = AlertRuleRow(name=name, enabled=current.enabled, params={}, cordon=False, updated_at=clock.now())
        session.add(row)
    if change.enabled is not None:
        row.enabled = change.enabled
    if change.params:
        row.params = {**row.params, **{k: float(v) for k, v in change.params.items()}}
    if change.cordon is not None:
        row.cordon = change.cordon
    row.updated_at = clock.now()
    session.flush()
    return _rule_view(rule_settings(session, monitor_interval_seconds)[name], monitor_interval_seconds)


def prometheus_rules_file(session: Session, monitor_interval_seconds: float) -> str:
    return rules.prometheus_rules(rule_settings(session, monitor_interval_seconds))


class WindowedUtilisation:
    """The running jobs' mean GPU utilisation over the idle rule's window, read again only
    when a tenth of the window has passed (or the window changed): an average over 30
    minutes moves little in 30 s, and reading it scans every task sample in the window
    (180,000 rows for 1,000 tasks sampled every 10 s; ``benchmarks/bench_alerts.py``)."""

    def __init__(self) -> None:
        self._read: tuple[datetime, timedelta, dict[int, float]] | None = None

    def of(self, session: Session, job_ids: list[int], now: datetime, window: timedelta) -> dict[int, float]:
        if self._read is not None:
            read_at, read_window, util = self._read
            if read_window == window and timedelta(0) <= now - read_at < window / 10:
                return util
        util = alert_queries.mean_gpu_util(session, job_ids, now - window)
        self._read = (now, window, util)
        return util


def read_facts(
    session: Session, settings: Mapping[str, rules.RuleSettings], clock: Clock,
    utilisation: WindowedUtilisation | None = None,
) -> rules.Facts:
    now = clock.now()
    idle = settings[rules.RuleName.IDLE_GPU_JOB]
    window = timedelta(minutes=float(idle.params.get("window_minutes", 30.0)))
    running = alert_queries.running_jobs_with_gpus(session)
    job_ids = [r[0] for r in running]
    util = (utilisation or WindowedUtilisation()).of(session, job_ids, now, window) if idle.enabled else {}
    waiting_after = timedelta(minutes=float(settings[rules.RuleName.LONG_WAITING_JOB].params.get("minutes", 30.0)))
    samples = {s.node: s for s in metric_queries.latest_node_samples(session, now - SAMPLE_LOOKBACK)}
    flagged = {a.node for a in alert_queries.firing_alerts(session) if a.rule == rules.RuleName.NODE_UNHEALTHY}
    nodes = []
    for node in node_queries.all_nodes(session):
        sample = samples.get(node.name)
        nodes.append(rules.NodeFacts(
            name=node.name, schedulable=node.schedulable, cordoned=node.cordoned,
            gpu_indices=tuple(int(g["index"]) for g in node.gpus),
            sampled_at=sample.at if sample is not None else None,
            disk_used_pct=sample.disk_used_pct if sample is not None else None,
            gpus=tuple(sample.gpu_dicts()) if sample is not None else (),
        ))
    return rules.Facts(
        now=now,
        running=[rules.RunningJob(job_id, user, vc, started, gpus, util.get(job_id))
                 for job_id, user, vc, started, gpus in running],
        waiting=[rules.WaitingJob(*w) for w in alert_queries.waiting_jobs(session, now - waiting_after)],
        # A node not sampled in the lookback has no sampler, and its silence says nothing —
        # unless it is already flagged: then its raw samples have merely aged out of the
        # history, and it stays unhealthy until it is sampled again.
        nodes=[n for n in nodes if n.sampled_at is not None or not n.schedulable or n.name in flagged],
    )


class Evaluation(NamedTuple):
    """What one evaluation changed."""

    opened: list[AlertRow]
    changed: list[AlertRow]  # still firing, about another problem now: told again
    resolved: list[AlertRow]


def evaluate(
    session: Session, clock: Clock, monitor_interval_seconds: float, utilisation: WindowedUtilisation | None = None
) -> Evaluation:
    """Judge the rules now; the alerts opened, changed and resolved.

    A firing alert's text follows its figures; when it tells of another problem (``rules.
    same_problem``: a different failure on the same node, another pending reason), every
    receiver is told it again, as firing with the new text — the stored alert and its
    notices say the same thing. Figures that merely move are not news and are not re-sent.
    """
    settings = rule_settings(session, monitor_interval_seconds)
    facts = read_facts(session, settings, clock, utilisation)
    findings = {(f.rule, f.subject): f for f in rules.evaluate(facts, settings)}
    now = clock.now()
    opened: list[AlertRow] = []
    resolved: list[AlertRow] = []
    changed: list[AlertRow] = []
    firing = {(a.rule, a.subject): a for a in alert_queries.firing_alerts(session)}
    for key, alert in firing.items():
        if key not in findings:
            alert.state, alert.ended_at = RESOLVED, now
            resolved.append(alert)
        else:
            # The figures move while it fires; that it cordoned the node stays said.
            message = findings[key].message
            if not rules.same_problem(alert.message.removesuffix(CORDONED), message):
                alert.notified = {}
                changed.append(alert)
            alert.message = message + (CORDONED if alert.message.endswith(CORDONED) else "")
    for key, finding in findings.items():
        if key in firing:
            continue
        alert = AlertRow(rule=str(finding.rule), subject=finding.subject, job_id=finding.job_id, node=finding.node,
                         state=FIRING, severity=rules.RULES[finding.rule].severity, message=finding.message,
                         started_at=now, notified={})
        session.add(alert)
        opened.append(alert)
        if finding.node is not None and settings[finding.rule].cordon:
            node = node_queries.node_named(session, finding.node)
            if node is not None and not node.cordoned:
                node.cordoned = True
                alert.message += CORDONED
    session.flush()
    return Evaluation(opened, changed, resolved)


def list_alerts(session: Session, viewer: UserRow, *, include_resolved: bool = False) -> list[AlertView]:
    """Alerts, newest first: an admin sees all; a user only those about their own jobs."""
    rows = alert_queries.listed_alerts(session, include_resolved=include_resolved,
                                       user_id=None if viewer.is_admin else viewer.id)
    return [alert_view(r) for r in rows]


def alert_view(row: AlertRow) -> AlertView:
    return AlertView(id=row.id, rule=row.rule, subject=row.subject, jobId=row.job_id, node=row.node,
                     state=row.state, severity=row.severity, message=row.message, startedAt=row.started_at,
                     endedAt=row.ended_at)


def stop_flagged_job(session: Session, viewer: UserRow, alert_id: int, clock: Clock) -> JobRow:
    """An admin stops the job an alert is about; its owner reads why in the job's message
    and history: "stopped by <admin>: <rule>: <message>"."""
    if not viewer.is_admin:
        raise Forbidden("only an admin may stop a job from an alert; a job's owner can `yard stop` it")
    alert = alert_queries.alert_by_id(session, alert_id)
    if alert is None:
        raise NotFound(f"no alert {alert_id}; see `yard alerts --all`")
    if alert.job_id is None:
        raise Conflict(f"alert {alert_id} is about {alert.subject}, not a job: there is no job to stop")
    return job_service.request_stop(session, viewer, alert.job_id, clock=clock,
                                    because=f"{alert.rule}: {alert.message}")


# Notifying: what each receiver has not heard yet, and noting what it has.

def notice(row: AlertRow) -> Notice:
    labels = {"job": str(row.job_id)} if row.job_id is not None else {"node": row.node or ""}
    return Notice(row.id, row.rule, row.state, row.severity, row.message, row.started_at, row.ended_at, labels)


def unheard(session: Session, receivers: list[str]) -> dict[str, list[Notice]]:
    """For each receiver, the alerts whose current state it has not been told. An alert
    opened and resolved before anyone heard of it is told as resolved only."""
    pending: dict[str, list[Notice]] = {r: [] for r in receivers}
    for row in alert_queries.recent_alerts(session):
        for receiver in receivers:
            if row.notified.get(receiver) != row.state:
                pending[receiver].append(notice(row))
    return pending


def mark_heard(session: Session, receiver: str, told: list[Notice]) -> None:
    for n in told:
        row = alert_queries.alert_by_id(session, n.id)
        if row is not None:
            row.notified = {**row.notified, receiver: n.state}

