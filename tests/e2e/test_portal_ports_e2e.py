"""A running job's Ports links in a real browser: its owner clicks one on the job page and
reads the task's own HTTP server through the proxy (its relative links too); another
signed-in user opening the same address gets the portal's refusal page, not the content,
and so does an admin's browser; a signed-out browser is sent to sign in first, and then on
to the task's page."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e.browser import SCREENSHOTS, sign_in_with_token
from e2e.server import Server
from e2e.webjob import WebJob, served

pytestmark = [pytest.mark.e2e, pytest.mark.idle_cluster]  # the worker's shared `yard up` (conftest.py)


@pytest.fixture
def web(server: Server) -> Iterator[WebJob]:
    with served(server) as job:
        yield job


# The task's page names no icon, so Chromium asks this origin for /favicon.ico, which is no page.
@pytest.mark.refused_statuses(404)
def test_the_owner_clicks_a_ports_link_and_reads_the_tasks_page(server: Server, web: WebJob,
                                                                 browser_page: Any) -> None:
    page = browser_page
    page.goto(server.url + web.path)  # signed out: the sign-in form, which comes back here
    assert page.url.startswith(f"{server.url}/signin?next=/proxy/jobs/{web.job}/")
    sign_in_with_token(page, server, web.alice, web.path)
    page.get_by_role("link", name=web.marker).wait_for()

    page.goto(f"{server.url}/jobs/{web.job}")
    ports = page.locator("td.ports")
    assert ports.inner_text().split() == [f"http:{web.http}", f"ws:{web.ws}"]  # a link each, apart
    link = ports.get_by_role("link", name=f"http:{web.http}")
    assert link.get_attribute("href") == web.path
    with page.context.expect_page() as opened:  # the link opens a new tab
        link.click()
    task_page = opened.value
    task_page.wait_for_load_state()
    assert task_page.url == server.url + web.path
    assert task_page.get_by_role("heading").first.inner_text() == "Directory listing for /"
    task_page.get_by_role("link", name=web.marker).click()  # a relative link, through the proxy
    task_page.wait_for_url(server.url + web.path + web.marker)
    assert task_page.locator("body").inner_text().strip() == "hello"
    # The WebSocket port is linked too; the socket itself is tested in test_proxy_e2e.py.
    assert ports.get_by_role("link", name=f"ws:{web.ws}").count() == 1
    task_page.close()


def test_another_signed_in_user_gets_the_refusal_page_not_the_tasks(server: Server, web: WebJob,
                                                                     chromium: Any) -> None:
    refusals = (  # who, their token, then what the portal's refusal page says
        ("bob", web.bob, 404, "Not found", f"no job {web.job}"),
        # An admin's browser session would run the job's pages with the admin's rights.
        ("admin", web.admin_token, 403, "Not allowed", f"job {web.job} is another user's: reach its ports with "
                                                       f"`yard port-forward {web.job}`, not through the browser"),
    )
    for who, token, status, heading, message in refusals:
        context = chromium.new_context(viewport={"width": 1360, "height": 900})
        try:
            page = context.new_page()
            page.set_default_timeout(20_000)
            sign_in_with_token(page, server, token, "/")
            response = page.goto(server.url + web.path)
            assert response is not None and response.status == status, who
            assert page.get_by_role("heading").first.inner_text() == heading
            assert page.get_by_role("alert").inner_text() == message
            assert web.marker not in page.content()
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOTS / f"proxy_refused_to_{who}.png"), full_page=True, caret="initial")
        finally:
            context.close()
