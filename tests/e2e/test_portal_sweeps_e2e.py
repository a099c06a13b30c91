"""A sweep in a real browser against a real `yard up`: its page shows the first job running
and the second waiting for it (``parallel: 1``), then, without a reload, both succeeded with
the metric read from each log; a parameter holding HTML stays text; the job's page links
back to the sweep."""

from __future__ import annotations

import json
from typing import Any

import pytest

from e2e.browser import admin_token, sign_in_with_token
from e2e.server import Server

pytestmark = [pytest.mark.e2e, pytest.mark.idle_cluster]  # the worker's shared `yard up` (conftest.py)

SCRIPT = "<script>alert(1)</script>"


def test_a_sweep_runs_one_job_at_a_time_and_its_page_follows_it(server: Server, browser_page: Any,
                                                                 gates: Any) -> None:
    page = browser_page
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.accept()))
    sweep = server.admin().submit_sweep(json.dumps({
        "name": "portal-sweep",
        "parameters": {"tag": "x"},
        "taskRoles": {"main": {"commands": [
            "echo \"loss=0.$TRAINYARD_SWEEP_INDEX tag=<% $parameters.tag %>\"",
            f"while [ ! -e {gates}/go ]; do sleep 0.05; done",
        ]}},
        "sweep": {"list": [{"tag": SCRIPT}, {"tag": "plain"}], "parallel": 1,
                  "metric": {"pattern": "loss=([0-9.]+)"}},
    }), content_type="application/json")
    first, second = (m.jobId for m in sweep.members)
    sign_in_with_token(page, server, admin_token(server), f"/sweeps/{sweep.id}")
    rows = page.locator("table.sweep-members tbody tr")
    rows.nth(0).filter(has_text="RUNNING").wait_for()  # htmx takes the table again as it changes
    assert "WAITING" in rows.nth(1).inner_text() and "running" in rows.nth(1).locator(".pending").inner_text()
    assert SCRIPT in rows.nth(0).locator("code").inner_text()  # shown as text, not run
    (gates / "go").touch()
    rows.nth(1).filter(has_text="SUCCEEDED").wait_for()
    rows.nth(0).filter(has_text="SUCCEEDED").wait_for()
    assert [rows.nth(i).locator("td.metric").inner_text() for i in (0, 1)] == ["0.0", "0.1"]
    page.get_by_role("link", name=str(second), exact=True).click()
    page.wait_for_url(f"{server.url}/jobs/{second}")
    page.locator("#job-sweep").get_by_role("link", name=f"sweep {sweep.id}").click()
    page.wait_for_url(f"{server.url}/sweeps/{sweep.id}")
    assert page.locator(f'a[href="/jobs/{first}"]').count() >= 1
    assert dialogs == []
