"""The portal's environments, storages and images pages in a real browser against a real
`yard up`: an admin creates a storage and grants it to bob read-only, builds an environment
from pasted requirements (READY once its build job has run) and opens the images page; bob
sees the storage granted to him, not the admin's private environment, and no admin forms;
his job's page says which storage it mounts."""

from __future__ import annotations

import pytest

from e2e.browser import SCREENSHOTS, admin_token, sign_in_with_token
from e2e.server import Server
from trainyard.client import Client

pytestmark = [pytest.mark.e2e, pytest.mark.idle_cluster]  # the worker's shared `yard up` (conftest.py)

XSS = '<script>alert(1)</script>"><img src=x onerror=alert(2)>'
BUILD_SECONDS = 240  # a venv on a busy two-core machine; nothing to download


def shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"portal_{name}.png"), full_page=True, caret="initial")


def test_the_environments_storages_and_images_pages(server: Server, browser_page) -> None:
    page = browser_page
    alerts: list[str] = []
    page.on("dialog", lambda dialog: (alerts.append(dialog.message) if dialog.type == "alert" else None,
                                      dialog.accept()))
    admin = server.admin()
    bob_token = server.add_users("bob")["bob"]  # on the shared server a test before may have made bob

    sign_in_with_token(page, server, admin_token(server), "/storages")
    form = page.locator('form[action="/storages"]')
    form.locator('input[name="name"]').fill("datasets")
    form.locator('input[name="path"]').fill("/srv/datasets")
    form.locator('input[name="kind"]').fill("nfs")
    form.locator('input[name="description"]').fill(XSS)
    form.get_by_role("button", name="Create storage").click()
    assert page.get_by_role("status").inner_text().startswith("created storage datasets")
    row = page.locator('tr[data-storage="datasets"]')
    row.locator('select[name="grantee"]').select_option("bob")
    row.get_by_label("read-only").check()
    row.get_by_role("button", name="Grant").click()
    assert page.get_by_role("status").inner_text() == "bob may mount datasets read-only"
    assert page.locator('tr[data-storage="datasets"]').get_by_text(XSS).count() == 1  # shown as text
    shot(page, "storages_admin")

    page.get_by_role("navigation").get_by_role("link", name="Environments").click()
    form = page.locator('form[action="/environments"]')
    form.locator('input[name="name"]').fill("tools")
    form.locator("textarea").fill("# nothing to install: the venv alone\n")
    form.get_by_role("button", name="Build environment").click()
    assert "environment tools is being built by job" in page.get_by_role("status").inner_text()
    admin.wait_environment("tools", timeout=BUILD_SECONDS)
    page.goto(server.url + "/environments")  # not reload: that would post the form again
    env = page.locator('tr[data-environment="tools"]')
    assert env.locator(".state").inner_text() == "READY", server.log()
    shot(page, "environments")
    env.get_by_role("link", name="job").click()
    page.locator("#job-state[data-state='SUCCEEDED']").wait_for()

    page.get_by_role("navigation").get_by_role("link", name="Images").click()
    page.wait_for_url(server.url + "/images")  # the click waits for the navigation to start, not to load
    assert page.get_by_role("heading", name="Pull an image").count() == 1
    shot(page, "images")

    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(server.url + "/signin")
    sign_in_with_token(page, server, bob_token, "/storages")
    assert page.locator("tr[data-storage]").count() == 1
    assert page.locator('tr[data-storage="datasets"] .access').inner_text() == "read-only"
    assert page.locator('form[action="/storages"]').count() == 0
    shot(page, "storages_user")
    page.goto(server.url + "/environments")
    assert page.locator('tr[data-environment="tools"]').count() == 0  # the admin's, private
    page.goto(server.url + "/images")
    assert page.locator('form[action="/images/pull"]').count() == 0

    bob = Client(server.url, bob_token)
    job = bob.submit(b"name: reader\nstorages: [{name: datasets, mountPath: /data, readOnly: true}]\n"
                     b"taskRoles:\n  main:\n    commands: ['true']\n", content_type="application/yaml").id
    page.goto(f"{server.url}/jobs/{job}")
    assert "datasets → /data (read-only)" in page.locator("table.runs-in").inner_text()
    shot(page, "job_runs_in")
    assert alerts == []  # the hostile description ran nothing
