"""The sweeps pages in process (SQLite and PostgreSQL): ``/sweeps`` and ``/sweeps/{id}``
with each job's parameters, state and metric (read from its log); links from a job's page
and the jobs list; Stop for the whole sweep; another user's sweep not found; user text
(parameters, the metric's pattern, log lines) shown as text."""

from __future__ import annotations

import pytest
from api.harness import Api

from portal.harness import csrf_of, signed_in
from portal.test_portal_jobs import place, write_log
from trainyard.core.states import TaskState

pytestmark = pytest.mark.postgres

SCRIPT = "<script>alert(1)</script>"
SWEEP = {
    "name": "grid", "parameters": {"opt": "x"},
    "taskRoles": {"m": {"commands": ["echo <% $parameters.opt %>"]}},
    "sweep": {"list": [{"opt": SCRIPT}, {"opt": "sgd"}], "parallel": 1,
              "metric": {"pattern": "loss=(\\S+)|<b>"}},
}


def test_the_sweep_page_shows_each_job_its_parameters_state_and_metric_escaped(api: Api) -> None:
    made = api.user.post("/api/v1/sweeps", json=SWEEP)
    assert made.status_code == 201, made.text
    sweep = made.json()
    first, second = (m["jobId"] for m in sweep["members"])
    [key] = place(api, first, state=TaskState.SUCCEEDED)
    write_log(api, key, f"loss=9\nloss={SCRIPT}\ndone\n".encode())
    alice = signed_in(api, "alice")
    page = alice.get(f"/sweeps/{sweep['id']}")
    assert page.status_code == 200, page.text
    assert SCRIPT not in page.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "<b>" not in page.text  # the pattern, as text
    rows = page.text.split('data-index="')[1:]
    assert f'href="/jobs/{first}"' in rows[0] and "SUCCEEDED" in rows[0]
    assert "loss" not in rows[0].split('class="metric">')[1].split("<")[0]  # the group, not the line
    assert "&lt;script&gt;" in rows[0].split('class="metric">')[1]  # the last matching line's value, escaped
    assert "WAITING" in rows[1] and 'class="metric">–' in rows[1]
    assert 'hx-trigger="every' in page.text  # live: a job has not ended
    listing = alice.get("/sweeps")
    assert listing.status_code == 200 and f'href="/sweeps/{sweep["id"]}"' in listing.text
    # A job of the sweep links to it, from its page and from the jobs list.
    assert f'href="/sweeps/{sweep["id"]}"' in alice.get(f"/jobs/{second}").text
    jobs = alice.get("/jobs").text
    assert 'id="sweeps-link"' in jobs and f'title="job 1 of sweep {sweep["id"]}"' in jobs
    # Stop, for the whole sweep: then it has ended and the page polls no more.
    stopped = alice.post(f"/sweeps/{sweep['id']}/stop", data={"csrf": csrf_of(page.text)})
    assert stopped.status_code == 303
    page = alice.get(f"/sweeps/{sweep['id']}")
    assert "STOPPED" in page.text and 'hx-trigger="every' not in page.text and "Stop sweep" not in page.text


def test_another_users_sweep_is_not_found_and_not_listed(api: Api) -> None:
    theirs = api.admin.post("/api/v1/sweeps", json=SWEEP).json()
    alice = signed_in(api, "alice")
    assert alice.get(f"/sweeps/{theirs['id']}").status_code == 404
    page = alice.get("/sweeps")
    assert f'data-sweep="{theirs["id"]}"' not in page.text and "No sweeps yet" in page.text
    assert alice.post(f"/sweeps/{theirs['id']}/stop", data={"csrf": csrf_of(page.text)}).status_code == 404
    assert api.user.get(f"/api/v1/sweeps/{theirs['id']}").status_code == 404
    admin = signed_in(api, "admin")
    assert admin.get(f"/sweeps/{theirs['id']}").status_code == 200
