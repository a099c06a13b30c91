"""``yard alerts``: the alerts (firing, or ``--all``), the rules and their thresholds
(``rules``, ``rules --prometheus``), changing a rule (``set RULE key=value…``) and stopping
the job an alert flagged (``stop ALERT_ID``)."""

from __future__ import annotations

import argparse

from trainyard.cli import render
from trainyard.client import Client, UsageError

BOOLEANS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}


def parse_changes(pairs: list[str]) -> tuple[bool | None, dict[str, float], bool | None]:
    """``enabled=…``, ``cordon=…`` and thresholds (``KEY=NUMBER``) from the command line."""
    enabled = cordon = None
    params: dict[str, float] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"{pair!r}: write KEY=VALUE, e.g. days=7 or enabled=false")
        if key in ("enabled", "cordon"):
            if value.lower() not in BOOLEANS:
                raise UsageError(f"{key}: expected true or false, not {value!r}")
            if key == "enabled":
                enabled = BOOLEANS[value.lower()]
            else:
                cordon = BOOLEANS[value.lower()]
            continue
        try:
            params[key] = float(value)
        except ValueError:
            raise UsageError(f"{key}: expected a number, not {value!r}") from None
    return enabled, params, cordon


def cmd_alerts(client: Client, args: argparse.Namespace) -> int:
    if args.action == "rules":
        if args.prometheus:
            print(client.prometheus_alert_rules(), end="")
            return 0
        rules = client.alert_rules()
        if args.json:
            render.print_json(rules)
        else:
            print(render.table(
                ["RULE", "ENABLED", "SEVERITY", "PARAMETERS", "CORDON"],
                [[r.name, "yes" if r.enabled else "no", r.severity,
                  " ".join(f"{k}={render.num(v)}" for k, v in r.params.items()),
                  ("yes" if r.cordon else "no") if r.mayCordon else "-"] for r in rules]))
        return 0
    if args.action == "set":
        enabled, params, cordon = parse_changes(args.changes)
        rule = client.set_alert_rule(args.rule, enabled=enabled, params=params or None, cordon=cordon)
        settings = " ".join(f"{k}={render.num(v)}" for k, v in rule.params.items())
        text = f"rule {rule.name}: {'enabled' if rule.enabled else 'disabled'}, {settings}"
        text += f", cordon={'yes' if rule.cordon else 'no'}" if rule.mayCordon else ""
        render.print_json(rule) if args.json else print(text + " (from the next evaluation)")
        return 0
    if args.action == "stop":
        job = client.stop_flagged_job(args.id)
        render.print_json(job) if args.json else print(f"job {job.id}: {job.state}: {job.message}")
        return 0
    alerts = client.alerts(include_resolved=args.all)
    if args.json:
        render.print_json(alerts)
    elif not alerts:
        print("no alerts firing" if not args.all else "no alerts")
    else:
        print(render.table(
            ["ID", "STATE", "SEVERITY", "RULE", "SUBJECT", "SINCE", "MESSAGE"],
            [[a.id, a.state, a.severity, a.rule, a.subject, render.when(a.startedAt), a.message] for a in alerts]))
    return 0
