"""The portal's admin pages in a real browser against a real `yard up` (4 simulated GPUs):
an admin creates a VC, a user and a token, and the user signs in with that token but can
neither open the users page nor cordon; the cluster page shows a running job's GPU as
allocated, cordons a node, and follows a change made elsewhere without a reload."""

from __future__ import annotations

import pytest
from deadlines import scaled_ms

from e2e.browser import SCREENSHOTS, admin_token, sign_in_with_token
from e2e.server import Server, wait_until
from trainyard.core.states import JobState

pytestmark = [pytest.mark.e2e, pytest.mark.shares_server]  # one `yard up` for the file (conftest.py)

XSS_NAME = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
SLEEPER = b"name: sleeper\ntaskRoles:\n  m:\n    resourcePerInstance: {gpu: 1}\n    commands: ['sleep 600']\n"


@pytest.mark.refused_statuses(403)  # bob's tries at the admin page and action
def test_an_admin_creates_a_vc_a_user_and_a_token_and_that_user_is_no_admin(server: Server, browser_page) -> None:
    page = browser_page
    alerts: list[str] = []
    page.on("dialog", lambda dialog: (alerts.append(dialog.message) if dialog.type == "alert" else None,
                                      dialog.accept()))
    sign_in_with_token(page, server, admin_token(server), "/vcs")
    form = page.locator('form[action="/vcs"]')
    form.locator('input[name="name"]').fill("vision")
    form.locator('input[name="gpus"]').fill("2")
    form.get_by_role("button", name="Create VC").click()
    assert page.get_by_role("status").inner_text() == "created virtual cluster vision"
    assert page.locator('tr[data-vc="vision"] td').nth(1).inner_text() == "2 GPUs (any model)"

    page.get_by_role("navigation").get_by_role("link", name="Users").click()
    new_user = page.locator("form#new-user")
    new_user.locator('input[name="name"]').fill("bob")
    new_user.get_by_role("button", name="Create user").click()
    assert "created user bob" in page.get_by_role("status").inner_text()
    account = page.locator("form#user-account")
    account.locator('select[name="user"]').select_option("bob")
    account.locator('input[name="token_name"]').fill(XSS_NAME)
    account.locator('input[name="current"]').fill(admin_token(server))  # asked again: no password, a token
    account.get_by_role("button", name="Create token").click()
    token = page.locator("input[data-token]").input_value()
    assert token.startswith("ty_")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "portal_users_new_token.png"), full_page=True)
    assert page.locator("table.tokens").get_by_text(XSS_NAME).count() == 1  # the name shown as text
    page.get_by_role("navigation").get_by_role("link", name="VCs").click()
    page.locator('tr[data-vc="vision"] select[name="grantee"]').select_option("bob")
    page.locator('tr[data-vc="vision"]').get_by_role("button", name="Grant").click()
    assert page.get_by_role("status").inner_text() == "bob may use vision"
    page.screenshot(path=str(SCREENSHOTS / "portal_vcs.png"), full_page=True)
    page.goto(server.url + "/users")
    page.screenshot(path=str(SCREENSHOTS / "portal_users.png"), full_page=True)
    page.goto(server.url + "/usage?period=30d")
    page.screenshot(path=str(SCREENSHOTS / "portal_usage.png"), full_page=True)

    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(server.url + "/signin")
    sign_in_with_token(page, server, token, "/vcs")
    assert page.locator(".who").inner_text().startswith("bob")
    assert page.locator('tr[data-vc="vision"]').count() == 1
    assert page.get_by_role("navigation").get_by_role("link", name="Users").count() == 0
    answer = page.goto(server.url + "/users")
    assert answer is not None and answer.status == 403
    assert page.get_by_role("alert").inner_text() == "this page is for admins"
    page.goto(server.url + "/cluster")
    assert page.get_by_role("button", name="Cordon").count() == 0
    # Posting the cordon form by hand, with bob's own valid form secret, is refused too.
    status = page.evaluate("""async () => {
        const body = new URLSearchParams({csrf: window.trainyard.csrfToken()});
        const node = document.querySelector("[data-node]").dataset.node;
        return (await fetch("/cluster/nodes/" + node + "/cordon", {method: "POST", body})).status;
    }""")
    assert status == 403
    assert not any(node.cordoned for node in server.admin().nodes())
    # Bob's own tokens: the one the admin made him, and one he makes himself, shown once.
    page.goto(server.url + "/account")
    page.get_by_label("token name").fill("laptop")
    page.get_by_label("your password").fill(token)  # bob has no password: his token, again
    page.get_by_role("button", name="Create token").click()
    assert page.locator("input[data-token]").input_value().startswith("ty_")
    assert page.locator("table.tokens tbody tr").count() == 2
    page.screenshot(path=str(SCREENSHOTS / "portal_account_tokens.png"), full_page=True)
    assert alerts == []  # the hostile token name ran nothing


def test_the_cluster_page_shows_a_running_jobs_gpu_allocated_and_follows_cordons(server: Server,
                                                                                  browser_page) -> None:
    page = browser_page
    page.on("dialog", lambda dialog: dialog.accept())  # the Cordon button's confirmation
    admin = server.admin()
    job = admin.submit(SLEEPER, content_type="application/yaml").id
    wait_until(lambda: admin.job(job).state == JobState.RUNNING, what="the job to run")
    sign_in_with_token(page, server, admin_token(server), "/cluster")
    assert page.locator(".gpu").count() == 4
    allocated = page.locator(".gpu.gpu-fully")
    assert allocated.count() == 1 and f"jobs {job}" in (allocated.get_attribute("title") or "")
    assert page.locator(".gpu.gpu-free").count() == 3

    page.get_by_role("button", name="Cordon").click()
    page.wait_for_url(server.url + "/cluster")
    assert page.locator(".badge.cordon").inner_text() == "cordoned"
    node = page.locator("[data-node]").get_attribute("data-node")
    assert node is not None and admin.nodes()[0].cordoned
    admin.cordon(node, cordoned=False)  # elsewhere: the page's polling shows it without a reload
    page.locator(".badge.cordon").wait_for(state="detached", timeout=scaled_ms(15))
    assert page.get_by_role("button", name="Cordon").is_visible()
    page.locator(".gpu.gpu-fully").hover()  # the screenshot shows the allocated GPU
