"""Job notices in the portal, in process: the account page's address and default (errors at
their fields, nothing half saved), and the Submit page's per-job choice written to the job
file and read back from it."""

from __future__ import annotations

import yaml
from api.harness import Api

from portal.harness import csrf_of, signed_in
from portal.test_portal_submit import FormValues, distributed_form, page_of


def test_the_account_page_sets_the_address_and_default_and_shows_errors_at_their_fields(api: Api) -> None:
    client = signed_in(api, "alice")
    page = client.get("/account").text
    assert 'id="notices"' in page and "This server sends no e-mail" in page
    csrf = csrf_of(page)
    form = {"csrf": csrf, "email": "alice@example.org", "on": ["failed", "preempted"], "send_email": "on",
            "webhook": ""}
    answer = client.post("/account/notices", data=form)
    assert answer.status_code == 200 and "your job notices are saved" in answer.text
    values = FormValues(answer.text).values
    assert values["email"] == "alice@example.org"
    assert 'value="failed" checked' in answer.text and 'value="ended" checked' not in answer.text
    account = api.sdk(api.user_token).account_notify()
    assert account.notify is not None and account.notify.on == ["failed", "preempted"] and account.notify.email
    bad = client.post("/account/notices", data={**form, "webhook": "http://169.254.169.254/x"})
    errors = FormValues(bad.text).errors
    assert bad.status_code == 422 and "link-local" in errors["notify-webhook"][0]
    bad = client.post("/account/notices", data={**form, "email": "<script>alert(1)</script>"})
    assert bad.status_code == 422 and "is not an e-mail address" in FormValues(bad.text).errors["notify-email"][0]
    assert "<script>alert(1)</script>" not in bad.text  # shown as text
    assert api.sdk(api.user_token).account_notify().email == "alice@example.org"  # nothing half saved
    none = client.post("/account/notices", data={"csrf": csrf, "email": "alice@example.org", "webhook": ""})
    assert none.status_code == 200 and api.sdk(api.user_token).account_notify().notify is None
    assert client.post("/account/notices", data={**form, "csrf": "forged"}).status_code == 403


def test_the_submit_page_writes_notify_on_and_reads_it_back(api: Api) -> None:
    client = signed_in(api, "alice")
    _, csrf = page_of(client)
    as_yaml = FormValues(client.post("/submit/to-yaml", data=distributed_form(csrf, notify="failed,preempted"))
                         .text).values["yaml"]
    assert yaml.safe_load(as_yaml)["notify"] == {"on": ["failed", "preempted"]}
    text = as_yaml.replace("notify:\n", "notify:\n  webhook: https://hooks.example.org/x\n")
    back = FormValues(client.post("/submit/to-form", data={"csrf": csrf, "yaml": text}).text).values
    assert back["notify"] == "failed,preempted"
    errors = FormValues(client.post("/submit/check", data=distributed_form(csrf, notify="done")).text).errors
    assert "must name events among" in errors["notify"][0]
    answer = client.post("/submit", data=distributed_form(csrf, notify="ended"))
    assert answer.status_code == 303
    job_id = int(answer.headers["location"].removeprefix("/jobs/"))
    assert api.user.get(f"/api/v1/jobs/{job_id}").json()["spec"]["notify"] == {"on": ["ended"]}
