"""The Jobs list and a job's page in process (SQLite and PostgreSQL): filters, order and
paging as the API serves them; who may see and stop what; stopping several jobs at once;
the page's live fragment, charts' figures and log routes; and user-controlled text (names,
descriptions, commands, env values, log lines) shown as text."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from api.harness import Api

from portal.harness import browser, csrf_of, signed_in
from trainyard.backends.base import TaskKey
from trainyard.core.states import AttemptState, JobState, TaskState
from trainyard.store.rows import AlertRow, AttemptRow, JobEventRow, JobRow, TaskRow, TaskSampleRow

SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(1)>'


def job_file(name: str, *, vc: str = "default", roles: dict[str, int] | None = None, **extra: Any) -> dict[str, Any]:
    roles = roles or {"main": 1}
    return {"name": name, "defaults": {"virtualCluster": vc}, **extra,
            "taskRoles": {role: {"instances": n, "commands": ["echo hi"]} for role, n in roles.items()}}


def submit(client, document: dict[str, Any]) -> int:
    answer = client.post("/api/v1/jobs", json=document)
    assert answer.status_code == 201, answer.text
    return int(answer.json()["id"])


def place(api: Api, job_id: int, *, state: TaskState = TaskState.RUNNING) -> list[TaskKey]:
    """What the controller would write when it places the job (attempt 0, every task on the
    one node) and, for a final ``state``, when its tasks end."""
    ended = state != TaskState.RUNNING
    with api.ctx.db.session() as session:
        job = session.get(JobRow, job_id)
        assert job is not None
        now = api.ctx.clock.now()
        attempt = AttemptRow(job_id=job_id, number=0, state=AttemptState.SUCCEEDED if ended else AttemptState.RUNNING,
                             started_at=now - timedelta(minutes=5), finished_at=now if ended else None)
        session.add(attempt)
        session.flush()
        keys = []
        for role, body in job.spec["taskRoles"].items():
            for index in range(int(body.get("instances", 1))):
                session.add(TaskRow(attempt_id=attempt.id, job_id=job_id, role=role, index=index, state=state,
                                    node="local", gpus=[[index, 1000]], cpu_milli=1000, memory_mb=1024, ports={},
                                    started_at=attempt.started_at, finished_at=attempt.finished_at,
                                    exit_code=0 if ended else None))
                keys.append(TaskKey(job_id, 0, role, index))
        job.state = JobState.SUCCEEDED if ended else JobState.RUNNING
        job.started_at = attempt.started_at
        job.finished_at = attempt.finished_at
    return keys


def write_log(api: Api, key: TaskKey, data: bytes) -> None:
    path = api.ctx.backend.log_path(key)  # type: ignore[attr-defined]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def job_ids_on(page: str) -> list[int]:
    return [int(i) for i in re.findall(r'<td><a href="/jobs/(\d+)">', page)]


# -- the list ------------------------------------------------------------------------------


@pytest.mark.postgres
def test_a_user_sees_only_their_own_jobs_and_an_admin_sees_everyones(api: Api) -> None:
    mine = submit(api.user, job_file("alice-job"))
    theirs = submit(api.admin, job_file("admin-job"))
    alice = signed_in(api, "alice").get("/jobs")
    assert alice.status_code == 200
    assert job_ids_on(alice.text) == [mine]
    assert 'name="user"' not in alice.text  # no user filter to offer: only their own jobs
    admin = signed_in(api, "admin").get("/jobs")
    assert job_ids_on(admin.text) == [theirs, mine]


def test_filters_are_query_parameters_and_combine(api: Api) -> None:
    first = submit(api.user, job_file("Resnet-train"))
    submit(api.user, job_file("bert"))
    third = submit(api.admin, job_file("resnet-eval"))
    place(api, first)
    admin = signed_in(api, "admin")
    assert job_ids_on(admin.get("/jobs", params={"name": "RESNET"}).text) == [third, first]
    assert job_ids_on(admin.get("/jobs", params={"name": "resnet", "user": "alice"}).text) == [first]
    assert job_ids_on(admin.get("/jobs", params={"state": "RUNNING"}).text) == [first]
    assert job_ids_on(admin.get("/jobs", params={"state": "WAITING,RUNNING,STOPPING", "name": "eval"}).text) == [third]
    assert job_ids_on(admin.get("/jobs", params={"vc": "nope"}).text) == []
    # An empty field of the GET form is no filter.
    assert len(job_ids_on(admin.get("/jobs", params={"state": "", "user": "", "vc": "", "name": ""}).text)) == 3
    # The text is matched as text: % and _ are no wildcards.
    assert job_ids_on(admin.get("/jobs", params={"name": "%"}).text) == []


def test_the_list_and_the_api_agree_on_filters_and_order(api: Api) -> None:
    ids = [submit(api.user, job_file(f"job-{i}")) for i in range(4)]
    api_page = api.user.get("/api/v1/jobs", params={"name": "JOB-", "order": "oldest", "limit": 50}).json()
    assert [j["id"] for j in api_page["items"]] == ids
    assert job_ids_on(signed_in(api, "alice").get("/jobs", params={"name": "JOB-", "order": "oldest"}).text) == ids
    assert api.user.get("/api/v1/jobs", params={"order": "sideways"}).status_code == 422
    # The API's cursor oldest first is `after`, the SDK's too.
    first = api.user.get("/api/v1/jobs", params={"order": "oldest", "limit": 3}).json()
    assert [j["id"] for j in first["items"]] == ids[:3] and first["next"] == ids[2]
    rest = api.sdk(api.user_token).jobs(order="oldest", after=first["next"], name="job-")
    assert [j.id for j in rest.items] == ids[3:] and rest.next is None


@pytest.mark.postgres
def test_paging_follows_the_cursor_both_ways(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainyard.portal import pages_jobs

    monkeypatch.setattr(pages_jobs, "PAGE_SIZE", 3)
    ids = [submit(api.user, job_file(f"j{i}")) for i in range(7)]
    client = signed_in(api, "alice")
    for order, expected in (("newest", ids[::-1]), ("oldest", ids)):
        seen: list[int] = []
        url: str | None = f"/jobs?order={order}&name=j"
        while url:
            page = client.get(url).text
            seen += job_ids_on(page)
            found = re.search(r'<a href="(/jobs\?[^"]+)" rel="next">', page)
            url = found.group(1).replace("&amp;", "&") if found else None
            if url:
                assert "name=j" in url  # the filters stay with the cursor
        assert seen == expected



@pytest.mark.postgres
def test_sorting_by_a_column_pages_through_every_job_once_in_that_order(api: Api,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from trainyard.portal import pages_jobs

    monkeypatch.setattr(pages_jobs, "PAGE_SIZE", 2)
    names = ["delta", "alpha", "charlie", "alpha", "bravo", "charlie", "echo"]
    ids = [submit(api.admin if i % 2 else api.user, job_file(name)) for i, name in enumerate(names)]
    owners = {job_id: ("admin" if i % 2 else "alice") for i, job_id in enumerate(ids)}
    by_name = sorted(zip(names, ids), key=lambda pair: (pair[0], -pair[1]))
    by_user = sorted(ids, key=lambda job_id: (owners[job_id], -job_id))
    client = signed_in(api, "admin")
    for order, expected in (("name", [job_id for _, job_id in by_name]),
                            ("-name", [job_id for _, job_id in sorted(by_name, key=lambda p: (p[0], p[1]),
                                                                         reverse=True)]),
                            ("user", by_user)):
        seen: list[int] = []
        url: str | None = f"/jobs?order={order}"
        while url:
            page = client.get(url).text
            seen += job_ids_on(page)
            found = re.search(r'<a href="(/jobs\?[^"]+)" rel="next">', page)
            url = found.group(1).replace("&amp;", "&") if found else None
        assert seen == expected, order
        # The API pages the same way, its cursor being the last job of the page.
        api_seen: list[int] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"order": order, "limit": 3, **({"before": cursor} if cursor else {})}
            answer = api.admin.get("/api/v1/jobs", params=params).json()
            api_seen += [j["id"] for j in answer["items"]]
            cursor = answer["next"]
            if cursor is None:
                break
        assert api_seen == expected, order
    page = client.get("/jobs?order=name").text
    assert 'href="/jobs?order=-name"' in page  # the header sorts the other way on a second click

def test_bad_query_parameters_are_a_4xx_page_naming_the_field(api: Api) -> None:
    client = signed_in(api, "alice")
    answer = client.get("/jobs", params={"state": "SLEEPING"})
    assert answer.status_code == 422 and "unknown state" in answer.text and "<html" in answer.text
    assert client.get("/jobs", params={"before": "x"}).status_code == 422
    assert client.get("/jobs", params={"order": "sideways"}).status_code == 422


def test_pending_jobs_show_their_short_reason_and_position(api: Api) -> None:
    job_id = submit(api.user, job_file("queued"))
    with api.ctx.db.session() as session:
        job = session.get(JobRow, job_id)
        assert job is not None
        job.pending_reason, job.pending_short, job.pending_position = "QUOTA", "VC quota used up", 3
        job.pending_message = "VC default has used its quota of 4 GPUs"
    client = signed_in(api, "alice")
    assert "#3 · VC quota used up" in client.get("/jobs").text
    page = client.get(f"/jobs/{job_id}").text
    assert "#3 in its VC's queue" in page and "VC default has used its quota of 4 GPUs" in page


def test_bulk_stop_stops_each_and_says_which_could_not(api: Api) -> None:
    waiting = submit(api.user, job_file("w"))
    running = submit(api.user, job_file("r"))
    place(api, running)
    done = submit(api.user, job_file("d"))
    place(api, done, state=TaskState.SUCCEEDED)
    admins = submit(api.admin, job_file("not-yours"))
    client = signed_in(api, "alice")
    page = client.get("/jobs", params={"name": ""}).text
    assert f'name="job" value="{waiting}"' in page and f'name="job" value="{done}"' not in page
    answer = client.post("/jobs/stop?state=WAITING,RUNNING,STOPPING,SUCCEEDED",
                         data={"csrf": csrf_of(page), "job": [str(waiting), str(running), str(done), str(admins)]})
    assert answer.status_code == 200, answer.text
    assert re.search(rf'Told to stop: <a href="/jobs/{waiting}">{waiting}</a>, <a href="/jobs/{running}">', answer.text)
    assert f"job {done}: job {done} has already ended (SUCCEEDED)" in answer.text
    assert f"job {admins}: no job {admins}" in answer.text  # another's job: not found, as in the API
    states = {j["id"]: j["state"] for j in api.admin.get("/api/v1/jobs").json()["items"]}
    assert (states[waiting], states[running], states[admins]) == ("STOPPED", "STOPPING", "WAITING")
    assert job_ids_on(answer.text) == [done, running]  # the list as it was filtered, after the stop


def test_bulk_stop_needs_the_form_secret_and_sound_ids(api: Api) -> None:
    job_id = submit(api.user, job_file("w"))
    client = signed_in(api, "alice")
    assert client.post("/jobs/stop", data={"job": str(job_id)}).status_code == 403
    csrf = csrf_of(client.get("/jobs").text)
    wrong = client.post("/jobs/stop", data={"csrf": csrf, "job": "1; DROP TABLE jobs"})
    assert wrong.status_code == 422 and "job:" in wrong.text
    assert client.post("/jobs/stop", data={"csrf": csrf}).status_code == 422
    assert api.user.get(f"/api/v1/jobs/{job_id}").json()["state"] == "WAITING"


# -- one job ---------------------------------------------------------------------------------


def test_the_job_page_shows_summary_tasks_by_role_events_and_clone(api: Api) -> None:
    job_id = submit(api.user, job_file("dist", roles={"ps": 1, "worker": 2}))
    place(api, job_id)
    page = signed_in(api, "alice").get(f"/jobs/{job_id}")
    assert page.status_code == 200
    text = page.text
    assert f"Job {job_id}" in text and '<h3 class="role">ps</h3>' in text and '<h3 class="role">worker</h3>' in text
    assert text.count("<td>local</td>") == 3
    assert f'href="/submit?clone={job_id}"' in text
    assert f'hx-get="/jobs/{job_id}/state"' in text and 'hx-trigger="every 2s"' in text  # live: it refreshes
    assert '<option value="worker/1">' in text  # the log's task selector
    assert "submitted" in text.lower()  # the events


def test_the_live_fragment_stops_polling_once_the_job_has_ended(api: Api) -> None:
    job_id = submit(api.user, job_file("short"))
    client = signed_in(api, "alice")
    assert "hx-trigger" in client.get(f"/jobs/{job_id}/state").text
    place(api, job_id, state=TaskState.SUCCEEDED)
    fragment = client.get(f"/jobs/{job_id}/state")
    assert fragment.status_code == 200 and "SUCCEEDED" in fragment.text
    assert "hx-trigger" not in fragment.text and "<html" not in fragment.text


def test_the_job_page_reads_as_a_timeline_names_gpu_devices_and_says_why_an_ended_job_has_no_charts(
        api: Api) -> None:
    job_id = submit(api.user, job_file("short"))
    client = signed_in(api, "alice")
    assert 'data-empty="no figures sampled yet"' in client.get(f"/jobs/{job_id}").text
    place(api, job_id, state=TaskState.SUCCEEDED)
    with api.ctx.db.session() as session:
        session.add(JobEventRow(job_id=job_id, at=api.ctx.clock.now(), kind="SUCCEEDED", message="the last event"))
    page = client.get(f"/jobs/{job_id}").text
    # oldest first, as `yard job` prints them (and kubectl describe): submitted before the end
    events = page[page.index('<table class="events">'):]
    assert events.index("submitted") < events.index("the last event")
    assert ">GPU devices</th>" in page and "<th>GPUs</th>" not in page  # indices under a header that says so
    assert "no figures for its run: it ended before its tasks were sampled" in page


def test_another_users_job_is_not_found_on_every_route(api: Api) -> None:
    job_id = submit(api.admin, job_file("admins"))
    place(api, job_id)
    client = signed_in(api, "alice")
    for path in ("", "/state", "/metrics.json", "/log", "/log/whole", "/log/all", "/log/all/whole"):
        assert client.get(f"/jobs/{job_id}{path}").status_code == 404, path
    csrf = csrf_of(client.get("/jobs").text)
    assert client.post(f"/jobs/{job_id}/stop", data={"csrf": csrf}).status_code == 404
    assert api.admin.get(f"/api/v1/jobs/{job_id}").json()["state"] == "RUNNING"
    assert signed_in(api, "admin").get(f"/jobs/{job_id}").status_code == 200


def test_signed_out_routes_send_to_sign_in(api: Api) -> None:
    job_id = submit(api.user, job_file("x"))
    assert browser(api).get(f"/jobs/{job_id}").status_code == 303
    assert browser(api).get(f"/jobs/{job_id}/log").status_code == 303
    assert browser(api).get(f"/jobs/{job_id}/state", headers={"HX-Request": "true"}).status_code == 401


def test_stop_from_the_job_page(api: Api) -> None:
    job_id = submit(api.user, job_file("stop-me"))
    client = signed_in(api, "alice")
    page = client.get(f"/jobs/{job_id}").text
    assert f'action="/jobs/{job_id}/stop"' in page and "data-confirm" in page
    assert client.post(f"/jobs/{job_id}/stop", data={}).status_code == 403  # no form secret
    answer = client.post(f"/jobs/{job_id}/stop", data={"csrf": csrf_of(page)})
    assert answer.status_code == 303 and answer.headers["location"] == f"/jobs/{job_id}"
    after = client.get(f"/jobs/{job_id}").text
    assert "STOPPED" in after and f'action="/jobs/{job_id}/stop"' not in after
    again = client.post(f"/jobs/{job_id}/stop", data={"csrf": csrf_of(page)})
    assert again.status_code == 409 and "already ended" in again.text


def test_attempts_selector_shows_the_chosen_attempt(api: Api) -> None:
    job_id = submit(api.user, job_file("retried"))
    place(api, job_id, state=TaskState.SUCCEEDED)
    with api.ctx.db.session() as session:
        job = session.get(JobRow, job_id)
        assert job is not None
        job.attempt = 1
        retry = AttemptRow(job_id=job_id, number=1, state=AttemptState.RUNNING, started_at=api.ctx.clock.now())
        session.add(retry)
        session.flush()
        session.add(TaskRow(attempt_id=retry.id, job_id=job_id, role="main", index=0, state=TaskState.RUNNING,
                            node="other-node", gpus=[], cpu_milli=1000, memory_mb=1024, ports={}))
    client = signed_in(api, "alice")
    assert "other-node" in client.get(f"/jobs/{job_id}").text
    first = client.get(f"/jobs/{job_id}", params={"attempt": 0}).text
    assert "other-node" not in first and "<td>local</td>" in first and 'data-attempt="0"' in first
    assert client.get(f"/jobs/{job_id}", params={"attempt": 7}).status_code == 404


def test_metrics_json_is_the_apis_answer(api: Api) -> None:
    job_id = submit(api.user, job_file("measured"))
    place(api, job_id)
    now = api.ctx.clock.now()
    with api.ctx.db.session() as session:
        for i in range(5):
            session.add(TaskSampleRow(job_id=job_id, attempt=0, role="main", index=0, node="local",
                                      at=now - timedelta(seconds=10 * (5 - i)), step=0, cpu_cores=1.5, memory_mb=300,
                                      gpus_held=1.0, gpu_util_pct=40.0))
    params = {"since": (now - timedelta(minutes=10)).isoformat(), "until": now.isoformat()}
    ours = signed_in(api, "alice").get(f"/jobs/{job_id}/metrics.json", params=params)
    assert ours.status_code == 200 and ours.headers["content-type"] == "application/json"
    assert ours.json() == api.user.get(f"/api/v1/jobs/{job_id}/metrics", params=params).json()
    assert [p["gpuUtilPct"] for p in ours.json()["tasks"][0]["points"]] == [40.0] * 5
    assert signed_in(api, "alice").get(f"/jobs/{job_id}/metrics.json", params={"since": "soon"}).status_code == 422


def test_the_log_is_read_by_offset_and_says_when_it_has_ended(api: Api) -> None:
    job_id = submit(api.user, job_file("logged", roles={"worker": 2}))
    client = signed_in(api, "alice")
    before = client.get(f"/jobs/{job_id}/log")
    assert before.status_code == 200 and before.content == b"" and before.headers["x-log-ended"] == "false"
    keys = place(api, job_id)
    write_log(api, keys[1], b"one\ntwo\nthree\n")
    first = client.get(f"/jobs/{job_id}/log", params={"task": "worker/1", "tail": 2})
    assert first.content == b"two\nthree\n" and first.headers["x-log-offset"] == "4"
    assert first.headers["x-log-ended"] == "false" and first.headers["x-log-attempt"] == "0"
    write_log(api, keys[1], b"one\ntwo\nthree\nfour\n")
    more = client.get(f"/jobs/{job_id}/log", params={"task": "worker/1", "offset": 14})
    assert more.content == b"four\n"
    place_done(api, job_id)
    last = client.get(f"/jobs/{job_id}/log", params={"task": "worker/1", "offset": 19})
    assert last.content == b"" and last.headers["x-log-ended"] == "true"
    unread = client.get(f"/jobs/{job_id}/log", params={"task": "worker/1", "offset": 0, "limit": 4})
    assert unread.content == b"one\n" and unread.headers["x-log-ended"] == "false"  # more to read yet
    assert client.get(f"/jobs/{job_id}/log", params={"task": "worker/9"}).status_code == 422


def place_done(api: Api, job_id: int) -> None:
    with api.ctx.db.session() as session:
        for task in session.query(TaskRow).filter(TaskRow.job_id == job_id):
            task.state = TaskState.SUCCEEDED
        job = session.get(JobRow, job_id)
        assert job is not None
        job.state = JobState.SUCCEEDED


def test_the_whole_log_streams_every_byte_in_pages(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    from trainyard.services import logs

    monkeypatch.setattr(logs, "LOG_PAGE_BYTES", 1000)
    job_id = submit(api.user, job_file("big"))
    [key] = place(api, job_id)
    data = b"".join(f"line {i}\n".encode() for i in range(5000))
    write_log(api, key, data)
    answer = signed_in(api, "alice").get(f"/jobs/{job_id}/log/whole")
    assert answer.status_code == 200 and answer.content == data
    assert answer.headers["content-type"].startswith("text/plain")
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert 'filename="job-' in answer.headers["content-disposition"]


def test_all_tasks_log_reads_on_by_cursor_sends_whole_lines_only_and_says_when_all_ended(api: Api) -> None:
    job_id = submit(api.user, job_file("pair", roles={"worker": 2}))
    client = signed_in(api, "alice")
    page = client.get(f"/jobs/{job_id}").text
    assert '<option value="*">All tasks</option>' in page
    before = client.get(f"/jobs/{job_id}/log/all")
    assert before.content == b"" and before.headers["x-log-ended"] == "false"
    keys = place(api, job_id)
    write_log(api, keys[0], b"a1\na2\n")
    write_log(api, keys[1], b"b1\nb2 half")
    first = client.get(f"/jobs/{job_id}/log/all", params={"tail": 1})
    assert first.text == "[worker/0] a2\n"  # worker/1's last line waits for its newline
    first = client.get(f"/jobs/{job_id}/log/all", params={"tail": 2})
    assert first.text == "[worker/0] a1\n[worker/0] a2\n[worker/1] b1\n"
    assert first.headers["x-log-attempt"] == "0" and first.headers["x-log-ended"] == "false"
    cursor = first.headers["x-log-cursor"]
    assert cursor == "worker/0:6,worker/1:3"
    write_log(api, keys[1], b"b1\nb2 half done\n")
    more = client.get(f"/jobs/{job_id}/log/all", params={"cursor": cursor})
    assert more.text == "[worker/1] b2 half done\n" and more.headers["x-log-ended"] == "false"
    place_done(api, job_id)
    last = client.get(f"/jobs/{job_id}/log/all", params={"cursor": more.headers["x-log-cursor"]})
    assert last.content == b"" and last.headers["x-log-ended"] == "true"
    whole = client.get(f"/jobs/{job_id}/log/all/whole")
    assert whole.text == "[worker/0] a1\n[worker/0] a2\n[worker/1] b1\n[worker/1] b2 half done\n"
    assert whole.headers["x-content-type-options"] == "nosniff"
    assert client.get(f"/jobs/{job_id}/log/all", params={"cursor": "worker/0"}).status_code == 422
    assert signed_in(api, "admin").get(f"/jobs/{job_id}/log/all").status_code == 200


# -- the home page's Stop of an abnormal job --------------------------------------------------------


def flag(api: Api, job_id: int) -> int:
    with api.ctx.db.session() as session:
        alert = AlertRow(rule="idle-gpu-job", subject=f"job:{job_id}", job_id=job_id, state="firing",
                         severity="warning", message=f"job {job_id} idles", started_at=api.ctx.clock.now())
        session.add(alert)
        session.flush()
        return alert.id


def test_an_admin_stops_a_flagged_job_from_the_home_page(api: Api) -> None:
    job_id = submit(api.user, job_file("idle"))
    place(api, job_id)
    alert_id = flag(api, job_id)
    admin = signed_in(api, "admin")
    home = admin.get("/").text
    assert f'action="/alerts/{alert_id}/stop"' in home
    answer = admin.post(f"/alerts/{alert_id}/stop", data={"csrf": csrf_of(home)})
    assert answer.status_code == 303 and answer.headers["location"] == "/"
    job = api.user.get(f"/api/v1/jobs/{job_id}").json()
    assert job["state"] == "STOPPING" and "idle-gpu-job" in job["message"]


def test_a_user_cannot_stop_from_an_alert_even_by_posting_the_form(api: Api) -> None:
    job_id = submit(api.user, job_file("idle"))
    place(api, job_id)
    alert_id = flag(api, job_id)
    alice = signed_in(api, "alice")
    answer = alice.post(f"/alerts/{alert_id}/stop", data={"csrf": csrf_of(alice.get("/").text)})
    assert answer.status_code == 403
    assert api.user.get(f"/api/v1/jobs/{job_id}").json()["state"] == "RUNNING"
    admin = signed_in(api, "admin")
    assert admin.post("/alerts/999/stop", data={"csrf": csrf_of(admin.get("/").text)}).status_code == 404


# -- user-controlled text is shown as text -------------------------------------------------------------


def test_names_descriptions_commands_env_and_log_lines_are_escaped(api: Api) -> None:
    document = job_file("hostile", description=IMG)
    document["taskRoles"]["main"].update(commands=[f"echo '{SCRIPT}'", f"echo '{IMG}'"],
                                         env={"PAYLOAD": SCRIPT, "OTHER": IMG})
    job_id = submit(api.user, document)
    [key] = place(api, job_id)
    write_log(api, key, f"{SCRIPT}\n{IMG}\n".encode())
    with api.ctx.db.session() as session:
        job = session.get(JobRow, job_id)
        assert job is not None
        job.state_message = IMG
        job.name = SCRIPT  # submit refuses such a name; shown as text all the same
    client = signed_in(api, "alice")
    for path in ("/jobs", f"/jobs/{job_id}", f"/jobs/{job_id}/state", "/", f"/jobs?name={IMG}&vc={SCRIPT}"):
        page = client.get(path).text
        assert "<script>alert(1)" not in page and "<img src=x" not in page, path
    page = client.get(f"/jobs/{job_id}").text
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 3  # name, command, env value
    assert "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;" in page  # description, command, env, message
    log = client.get(f"/jobs/{job_id}/log")
    assert log.content == f"{SCRIPT}\n{IMG}\n".encode()  # bytes as text/plain: the page adds them as text nodes
    assert log.headers["content-type"].startswith("text/plain") and log.headers["x-content-type-options"] == "nosniff"
    assert "script-src 'self'" in log.headers["content-security-policy"]


def test_the_home_page_loads_the_weeks_usage_card_on_its_own(api: Api) -> None:
    job_id = submit(api.user, job_file("counted"))
    place(api, job_id)  # started five minutes ago, one GPU
    client = signed_in(api, "alice")
    home = client.get("/").text
    assert 'hx-get="/home/usage"' in home and 'hx-trigger="load"' in home
    card = client.get("/home/usage")
    assert card.status_code == 200 and "<html" not in card.text
    assert '<p class="big">0.1</p>' in card.text  # 1 GPU x 5 min, to one decimal


def test_the_job_page_suspends_a_waiting_job_and_resumes_it(api: Api) -> None:
    job_id = submit(api.user, job_file("held"))
    client = signed_in(api, "alice")
    page = client.get(f"/jobs/{job_id}").text
    assert f'action="/jobs/{job_id}/suspend"' in page and f'action="/jobs/{job_id}/resume"' not in page
    assert client.post(f"/jobs/{job_id}/suspend").status_code == 403  # no form secret
    answer = client.post(f"/jobs/{job_id}/suspend", data={"csrf": csrf_of(page)}, follow_redirects=True)
    assert answer.status_code == 200 and 'state-suspended' in answer.text
    assert f'action="/jobs/{job_id}/resume"' in answer.text and "suspended by alice" in answer.text
    assert api.user.get(f"/api/v1/jobs/{job_id}").json()["heldBy"] == "alice"
    answer = client.post(f"/jobs/{job_id}/resume", data={"csrf": csrf_of(answer.text)}, follow_redirects=True)
    assert answer.status_code == 200 and api.user.get(f"/api/v1/jobs/{job_id}").json()["state"] == "WAITING"
    running = submit(api.user, job_file("plain"))
    place(api, running)
    page = client.get(f"/jobs/{running}").text  # it cannot save its state: no Suspend button
    assert f'action="/jobs/{running}/suspend"' not in page
    refused = client.post(f"/jobs/{running}/suspend", data={"csrf": csrf_of(page)})
    assert refused.status_code == 409 and "preemption: suspend" in refused.text
