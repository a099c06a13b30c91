"""Resource expressions and node labels set live, on a real `yard up` (local backend): a job
whose selector asks for a label no node has waits, saying so; `yard node label` sets it
without a restart, and the job starts on the next cycle."""

from __future__ import annotations

import json

import pytest

from e2e.server import Server, wait_until
from trainyard.client import TrainyardError

pytestmark = [pytest.mark.e2e, pytest.mark.idle_cluster]  # the worker's shared `yard up` (conftest.py)

JOB = """\
name: needs-ib
taskRoles:
  main:
    commands: ['echo on $(hostname)']
    resourcePerInstance:
      gpu: 1
      selector: 'gpu.memoryMB >= 1024 && node.labels["ib"] == "true"'
"""


def test_a_waiting_job_starts_once_an_admin_labels_a_node_for_its_selector(server: Server) -> None:
    admin = server.admin()
    node = admin.nodes()[0].name
    job = admin.submit(JOB).id
    pending = wait_until(lambda: admin.job(job).pending, timeout=60, what="a pending reason")
    assert 'no node meets node.labels["ib"] == "true"' in pending.message, pending
    assert admin.job(job).state == "WAITING"

    labelled = server.yard("node", "label", node, "ib=true")
    assert labelled.returncode == 0, labelled.stderr
    assert labelled.stdout.strip() == f"node {node}: labels ib=true"
    assert wait_until(lambda: admin.job(job).state == "SUCCEEDED" or admin.job(job).state == "FAILED",
                      timeout=120, what="the job to end") and admin.job(job).state == "SUCCEEDED"
    nodes = json.loads(server.yard("nodes", "--json").stdout)
    assert nodes[0]["labels"] == {"ib": "true"} and nodes[0]["adminLabels"] == {"ib": "true"}

    removed = server.yard("node", "label", node, "ib-")
    assert removed.returncode == 0 and removed.stdout.strip() == f"node {node}: labels none"


def test_an_invalid_selector_is_refused_by_submit_and_dry_run_with_its_field_and_position(server: Server) -> None:
    admin = server.admin()
    bad = JOB.replace("gpu.memoryMB >= 1024 &&", "gpu.memoryMB >= &&")
    with pytest.raises(TrainyardError) as refused:
        admin.submit(bad)
    assert refused.value.status == 422
    path = server.home / "bad.yaml"
    path.write_text(bad)
    checked = server.yard("submit", "--dry-run", str(path))
    assert checked.returncode != 0
    assert "taskRoles.main.resourcePerInstance.selector: syntax error: unexpected '&&' at line 1, column 17" \
        in checked.stderr, checked.stderr
    assert "\n" + " " * 18 + "^\n" in checked.stderr  # under the "&&", past the two spaces of indent
