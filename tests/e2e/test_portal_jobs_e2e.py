"""The Jobs pages in a real browser against a real `yard up`: a distributed job watched from
WAITING or RUNNING to SUCCEEDED on its page, its log read there (HTML in it stays text);
running jobs stopped from their page and from the list; an abnormal job flagged by an alert
rule and stopped by the admin from the home page."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from e2e.browser import admin_token, sign_in_with_token
from e2e.server import Server, running_server, wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.idle_cluster]  # the worker's shared `yard up` (conftest.py)

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'


def dialogs_of(page: Any) -> list[tuple[str, str]]:
    """Every dialog the page opens, accepted: confirms are ours; an alert would be a payload run."""
    opened: list[tuple[str, str]] = []

    def answer(dialog: Any) -> None:
        opened.append((dialog.type, dialog.message))
        dialog.accept()

    page.on("dialog", answer)
    return opened


def distributed_job(gates: Any) -> str:
    return json.dumps({
        "name": "portal-dist",
        "description": IMG,
        "taskRoles": {
            "main": {"commands": [
                "for i in 1 2 3; do echo \"line $i from main\"; done",
                f"echo '{SCRIPT}'",
                f"echo '{IMG}'",
                f"while [ ! -e {gates}/go ]; do sleep 0.05; done",
                "echo 'the last line'",
                # A result, its name and text the job's:
                f"echo '{SCRIPT}' > \"$TRAINYARD_JOB_DIR\"/{shlex.quote(IMG + '.txt')}",
                'ln -s /etc/shadow "$TRAINYARD_JOB_DIR/shadow"',
            ], "env": {"PAYLOAD": SCRIPT}},
            "helper": {"instances": 2, "commands": [f"while [ ! -e {gates}/go ]; do sleep 0.05; done"]},
        },
    })


def test_watch_a_distributed_job_run_and_succeed_and_read_its_log(server: Server, browser_page: Any,
                                                                  gates: Any) -> None:
    page = browser_page
    dialogs = dialogs_of(page)
    admin = server.admin()
    job_id = admin.submit(distributed_job(gates), content_type="application/json").id
    # A job that waits for it (issue 31): its page names the job it waits for, and how that stands.
    after = admin.submit({"name": "after", "dependencies": {"afterok": [job_id]},
                          "taskRoles": {"main": {"commands": ["true"]}}}).id
    sign_in_with_token(page, server, admin_token(server), f"/jobs/{after}")
    waiting = re.compile(rf"afterok job {job_id} \((WAITING|RUNNING), waiting\)")
    page.locator("#job-dependencies", has_text=waiting).wait_for()
    page.goto(f"{server.url}/jobs/{job_id}")
    state = page.locator("#job-state-name")
    state.filter(has_text="RUNNING").wait_for()
    assert page.locator("table.tasks tbody tr").count() == 3  # main/0, helper/0, helper/1
    log = page.locator("#log")
    page.locator("#log", has_text="line 3 from main").wait_for()
    assert SCRIPT in log.inner_text() and IMG in log.inner_text()  # shown as text
    assert page.locator("#log img, #log script").count() == 0
    (gates / "go").write_text("")
    state.filter(has_text="SUCCEEDED").wait_for()
    page.locator("#log", has_text="the last line").wait_for()
    page.locator("#log-status", has_text="the task has ended").wait_for()
    assert page.locator("#job-state").get_attribute("hx-trigger") is None  # no more polling
    # Another task's log, and the whole log behind its link.
    page.select_option("#log-task", "helper/1")
    assert page.locator("#log-whole").get_attribute("href") == f"/jobs/{job_id}/log/whole?task=helper%2F1"
    page.select_option("#log-task", "main/0")
    page.locator("#log", has_text="the last line").wait_for()
    # Every task's log at once, each line marked with its task.
    page.select_option("#log-task", "*")
    page.locator("#log", has_text="[main/0] the last line").wait_for()
    page.locator("#log-status", has_text="every task has ended").wait_for()
    assert "[main/0] line 1 from main\n" in log.inner_text() and page.locator("#log img, #log script").count() == 0
    assert page.locator("#log-whole").get_attribute("href") == f"/jobs/{job_id}/log/all/whole"
    whole = page.request.get(f"{server.url}/jobs/{job_id}/log/whole?task=main/0")
    assert whole.ok and whole.text().startswith("line 1 from main\n") and whole.text().endswith("the last line\n")
    assert page.locator(".description").inner_text() == IMG
    assert not dialogs, dialogs
    page.locator("#charts figure").first.wait_for()
    # The charts' axes: the job's own minutes however few samples it has (one sample once
    # gave a time axis of years, and a zero CPU one of 0-100 cores).
    page.wait_for_function("() => Object.keys(document.getElementById('charts').plots).length === 3")
    scales = page.evaluate("""() => Object.fromEntries(Object.entries(document.getElementById('charts').plots)
        .map(([field, d]) => [field, [d.plot.scales.x.min, d.plot.scales.x.max, d.plot.scales.y.min,
                                      d.plot.scales.y.max]]))""")
    job = admin.job(job_id)
    started, finished = job.startedAt.timestamp(), job.finishedAt.timestamp()
    for field, (x_min, x_max, y_min, y_max) in scales.items():
        # From 30 s before its start until the last redraw (while it ran: then) or its end.
        assert started - 60 <= x_min <= started and started < x_max <= finished + 60, (field, scales)
        assert y_min == 0 and (y_max == 100 if field == "gpuUtilPct" else 0 < y_max < 1e6), (field, scales)
    assert scales["cpuCores"][3] <= 8 * 1.1  # the node's 8 CPUs at most, not 0-100
    # One sample alone (a job of a few seconds): uPlot widens its own min and max (the max a
    # thousand days on) before it asks the scale's range, which must keep to the job's window.
    one = page.evaluate("""() => { const d = Object.values(document.getElementById('charts').plots)[0];
        const t = d.plot.data[0][0]; return d.plot.scales.x.range(d.plot, t, t + 86400000, 'x'); }""")
    assert started - 60 <= one[0] <= started and started < one[1] <= finished + 60, one
    # Its files (issue 31): the job's directory listed, the link shown not followed, the
    # result's name and text shown as text, its download an attachment.
    page.locator("#job-files").click()
    page.locator("#files").wait_for()
    assert page.locator("#files tr[data-type=link] td.name").inner_text() == "shadow → /etc/shadow"
    assert page.locator("#files tr[data-type=link] a").count() == 0
    page.locator("#files td.name a", has_text=f"{IMG}.txt").click()
    page.locator("#file-preview").wait_for()
    assert page.locator("#file-preview").inner_text() == SCRIPT + "\n"
    assert page.locator("#file-preview img, #file-preview script").count() == 0
    with page.expect_download() as download:
        page.locator("#file-download").click()
    assert Path(download.value.path()).read_text() == SCRIPT + "\n"
    page.goto(f"{server.url}/jobs/{after}")
    page.locator("#job-dependencies", has_text=f"afterok job {job_id} (SUCCEEDED, met)").wait_for()
    page.locator("#job-dependencies a").click()
    page.wait_for_url(f"{server.url}/jobs/{job_id}")
    page.goto(f"{server.url}/jobs/{job_id}")  # the screenshot is the job's page
    page.locator("#charts figure").first.wait_for()
    assert not dialogs, dialogs


def test_stop_running_jobs_from_the_job_page_and_from_the_list(server: Server, browser_page: Any) -> None:
    page = browser_page
    dialogs = dialogs_of(page)
    admin = server.admin()
    # The lists are filtered to this test's jobs by their names: the shared server has others'.
    sleeper = "name: NAME\ntaskRoles:\n  main:\n    commands: ['sleep 600']\n"
    first = admin.submit(sleeper.replace("NAME", "stop-me-first")).id
    second = admin.submit(sleeper.replace("NAME", "stop-me-second")).id
    wait_until(lambda: admin.job(first).state == admin.job(second).state == "RUNNING", what="both jobs to run")
    sign_in_with_token(page, server, admin_token(server), f"/jobs/{first}")
    page.get_by_role("button", name="Stop").click()
    page.wait_for_url(f"{server.url}/jobs/{first}")
    page.locator("#job-state-name").filter(has_text="STOPPED").wait_for()
    assert dialogs == [("confirm", f"Stop job {first}?")]
    page.goto(f"{server.url}/jobs?state=RUNNING&name=stop-me-")
    assert page.locator("table.jobs tbody td:nth-child(2)").all_inner_texts() == [str(second)]
    page.locator("#select-all").check()
    assert page.locator("#selected-count").inner_text() == "1 selected"
    page.get_by_role("button", name="Stop selected").click()
    page.locator(".stop-outcome", has_text="Told to stop").wait_for()
    wait_until(lambda: admin.job(second).state == "STOPPED", what="the second job to stop")
    page.goto(f"{server.url}/jobs?name=stop-me-")
    assert page.locator("table.jobs .state").all_inner_texts() == ["STOPPED", "STOPPED"]
    assert page.locator('input[name="job"]').count() == 0  # nothing left to stop


def test_an_abnormal_job_appears_on_home_and_the_admin_stops_it_there(
    database_url: str, tmp_path_factory: Any, browser_page: Any
) -> None:
    home = tmp_path_factory.mktemp("home")
    (home / "config.yaml").write_text(json.dumps({"alert_interval_seconds": 1}))
    database = None if database_url.startswith("sqlite") else database_url
    with running_server(home, gpus=2, database_url=database) as server:
        admin = server.admin()
        job_id = admin.submit("name: forever\ntaskRoles:\n  main:\n    commands: ['sleep 600']\n").id
        wait_until(lambda: admin.job(job_id).state == "RUNNING", what="the job to run")
        admin.set_alert_rule("long-running-job", params={"days": 0.00001})  # under a second
        wait_until(lambda: [a for a in admin.alerts() if a.jobId == job_id and a.state == "firing"],
                   what="the long-running alert")
        page = browser_page
        dialogs = dialogs_of(page)
        sign_in_with_token(page, server, admin_token(server), "/")
        row = page.locator("tr", has=page.locator(f'a[href="/jobs/{job_id}"]')).filter(has_text="long-running-job")
        row.get_by_role("button", name="Stop").click()
        page.wait_for_url(f"{server.url}/")
        assert dialogs and dialogs[0][0] == "confirm"
        wait_until(lambda: admin.job(job_id).state == "STOPPED", what="the flagged job to stop")
        assert "long-running-job" in admin.job(job_id).message
