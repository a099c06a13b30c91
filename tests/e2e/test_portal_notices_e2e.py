"""Job notices in a real browser: the account page's address, events and webhook saved and
shown again; a webhook into the server's own network refused at its field. A user of its own
sets them (nora, who has no jobs): on the worker's shared server, the admin's notices would
go out for the admin's jobs of every test after it."""

from __future__ import annotations

import pytest

from e2e.browser import sign_in_with_token

pytestmark = [pytest.mark.e2e, pytest.mark.idle_cluster]  # the worker's shared `yard up` (conftest.py)


@pytest.mark.refused_statuses(422)  # the refused webhook
def test_set_the_default_job_notices_on_the_account_page(server, browser_page):
    page = browser_page
    page.goto(server.url + "/account")
    sign_in_with_token(page, server, server.add_users("nora")["nora"], "/account")
    form = page.locator('form[action="/account/notices"]')
    form.locator('input[name="email"]').fill("nora@example.org")
    form.locator('input[value="failed"]').check()
    form.locator('input[value="preempted"]').check()
    form.locator('input[name="webhook"]').fill("http://169.254.169.254/latest/meta-data")
    form.get_by_role("button", name="Save job notices").click()
    assert "link-local" in page.locator('[data-field="notify-webhook"]').inner_text()
    form = page.locator('form[action="/account/notices"]')
    form.locator('input[name="webhook"]').fill("https://hooks.example.org/T1")
    form.locator('input[value="failed"]').check()
    form.locator('input[value="preempted"]').check()
    form.get_by_role("button", name="Save job notices").click()
    assert page.get_by_role("status").inner_text() == "your job notices are saved"
    page.reload()
    form = page.locator('form[action="/account/notices"]')
    assert form.locator('input[name="email"]').input_value() == "nora@example.org"
    assert form.locator('input[value="failed"]').is_checked() and not form.locator('input[value="ended"]').is_checked()
    assert form.locator('input[name="webhook"]').input_value() == "https://hooks.example.org/T1"
