"""`yard alerts` against the real app in process: listing, the rules and changing them,
the Prometheus file, and stopping the job an alert flagged, as an admin and as a user."""

from __future__ import annotations

import json
from collections.abc import Callable

from api.harness import Api

from trainyard.cli.exits import EXIT_AUTH, EXIT_ERROR, EXIT_USAGE
from trainyard.controller.alerting import AlertEvaluator
from trainyard.store.queries.metrics import add_samples
from trainyard.store.rows import NodeRow, NodeSampleRow

Yard = Callable[..., tuple[int, str, str]]  # the `yard` fixture (conftest.py)
JOB = "name: j\ntaskRoles:\n  m:\n    commands: ['sleep 600']\n"


def evaluate(api: Api) -> None:
    AlertEvaluator(api.ctx.db, api.ctx.clock, 30.0).run()


def test_rules_are_shown_and_changed_by_admins_only_and_take_effect_at_once(api: Api, yard: Yard) -> None:
    code, out, _ = yard("alerts", "rules", token=api.admin_token)
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["RULE", "ENABLED", "SEVERITY", "PARAMETERS", "CORDON"]
    assert "disk-full         yes      warning   used_pct=80" in out
    assert any(line.startswith("node-unhealthy") and line.endswith(" no") for line in lines)
    code, _, err = yard("alerts", "rules")  # alice
    assert code == EXIT_AUTH and "admin" in err

    code, out, _ = yard("alerts", "set", "disk-full", "used_pct=50", token=api.admin_token)
    assert (code, out) == (0, "rule disk-full: enabled, used_pct=50 (from the next evaluation)\n")
    code, _, err = yard("alerts", "set", "disk-full", "used=50", token=api.admin_token)
    assert code == EXIT_ERROR and "params.used: rule disk-full has no parameter 'used'" in err
    code, _, err = yard("alerts", "set", "disk-full", "enabled=maybe", token=api.admin_token)
    assert code == EXIT_USAGE and "enabled: expected true or false, not 'maybe'" in err
    code, _, err = yard("alerts", "set", "disk-full", "used_pct=lots", token=api.admin_token)
    assert code == EXIT_USAGE and "used_pct: expected a number, not 'lots'" in err
    code, out, _ = yard("alerts", "rules", "--prometheus", token=api.admin_token)
    assert code == 0 and "trainyard_node_disk_used_ratio > 0.5" in out

    with api.ctx.db.session() as session:
        node = session.query(NodeRow).one().name
        sample = NodeSampleRow(node=node, at=api.ctx.clock.now(), step=0, disk_used_pct=60.0, gpus=[])
        add_samples(session, [sample], [])  # as a monitoring round writes it
    evaluate(api)
    code, out, _ = yard("alerts", token=api.admin_token)
    header, row = out.splitlines()
    assert header.split() == ["ID", "STATE", "SEVERITY", "RULE", "SUBJECT", "SINCE", "MESSAGE"]
    assert row.split()[:5] == ["1", "firing", "warning", "disk-full", f"node:{node}"]
    assert row.endswith(f"node {node}: disk 60.0 % full (over 50 %)")
    code, out, _ = yard("alerts")  # alice: nothing about her jobs
    assert (code, out) == (0, "no alerts firing\n")


def test_an_admin_stops_a_flagged_job_and_its_owner_reads_why(api: Api, yard: Yard) -> None:
    response = api.user.post("/api/v1/jobs", content=JOB, headers={"content-type": "application/yaml"})
    job = response.json()["id"]
    code, _, _ = yard("alerts", "set", "long-waiting-job", "minutes=0.000001", token=api.admin_token)
    assert code == 0
    evaluate(api)
    code, out, _ = yard("alerts", "--json")  # alice sees the alert about her own job
    (alert,) = json.loads(out)
    assert (alert["rule"], alert["jobId"]) == ("long-waiting-job", job)
    code, _, err = yard("alerts", "stop", str(alert["id"]))
    assert code == EXIT_AUTH and "this needs an admin" in err
    code, out, _ = yard("alerts", "stop", str(alert["id"]), token=api.admin_token)
    assert code == 0 and out.startswith(f"job {job}: STOPPED: stopped by admin: long-waiting-job: job {job} has waited")
    code, out, _ = yard("job", str(job), "--json")
    detail = json.loads(out)
    assert detail["message"].startswith("stopped by admin: long-waiting-job: ")
    assert detail["message"].endswith(" before it started")


def test_stop_with_a_reason_tells_the_owner_and_a_reason_with_nul_is_refused(api: Api, yard: Yard) -> None:
    response = api.user.post("/api/v1/jobs", content=JOB, headers={"content-type": "application/yaml"})
    job = response.json()["id"]
    bad = api.admin.post(f"/api/v1/jobs/{job}/stop", params={"reason": "a\x00b"})
    assert bad.status_code == 422 and bad.json()["errors"][0]["path"] == "reason"
    code, out, _ = yard("stop", str(job), "--reason", "idle for two days; see #ops", token=api.admin_token)
    assert (code, out) == (0, f"job {job}: STOPPED\n")
    code, out, _ = yard("job", str(job), "--json")  # the owner
    detail = json.loads(out)
    assert detail["message"] == "stopped by admin: idle for two days; see #ops before it started"
    assert any(e["message"] == "stop requested by admin: idle for two days; see #ops" for e in detail["events"])
