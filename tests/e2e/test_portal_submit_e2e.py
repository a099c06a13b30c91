"""The Submit page in a real browser against a real ``yard up``: a distributed job built in
the form, the YAML editor following it and the form following the YAML, submitted and run
to the end; and a clone of a job with a secret that runs with the real secret while the
page never holds it. Hostile text typed in the form opens no dialog."""

from __future__ import annotations

import re

import pytest
from deadlines import scaled, scaled_ms

from e2e.browser import SCREENSHOTS, admin_token, sign_in_with_token
from e2e.server import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.idle_cluster]  # the worker's shared `yard up` (conftest.py)

SECRET = "s3cr3t-4711"
PAYLOADS = ("<script>alert(1)</script>", '"><img src=x onerror=alert(1)>')


def job_id_of(url: str) -> int:
    found = re.search(r"/jobs/(\d+)$", url)
    assert found, url
    return int(found.group(1))


def test_submit_a_distributed_job_through_the_form_and_the_yaml_editor(server, browser_page):
    page = browser_page
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    sign_in_with_token(page, server, admin_token(server), "/submit")
    yaml_editor = page.locator("#yaml")

    # Import: the file goes into the editor, and the form follows it.
    page.locator("#yaml-import").set_input_files(files=[{
        "name": "job.yaml", "mimeType": "application/yaml",
        "buffer": b"name: imported\ntaskRoles:\n  only: {commands: [echo hi]}\n"}])
    page.locator("#roles-0-name[value=only]").wait_for()
    assert page.locator("#name").input_value() == "imported"

    # Hostile text is shown as text, and Check puts the name's error at the name.
    page.locator("#name").fill(PAYLOADS[0])
    page.locator("#roles-0-commands").fill(f"echo '{PAYLOADS[1]}'")
    page.get_by_role("button", name="Check").click()
    page.locator('.field-error[data-field="name"]').wait_for()
    page.screenshot(path=str(SCREENSHOTS / "portal_submit_errors.png"), caret="initial")
    assert PAYLOADS[0] in page.locator("#name").input_value()

    page.locator("#name").fill("dist-e2e")
    page.locator("#roles-0-name").fill("ps")
    page.locator("#roles-0-gpu").fill("0")
    page.locator("#roles-0-commands").fill("echo ps says hello")
    page.get_by_role("button", name="Add task role").click()
    page.locator("#roles-1-name").fill("worker")
    page.locator("#roles-1-gpu").fill("1")
    page.locator("#roles-1-commands").fill('echo "worker $PAI_CURRENT_TASK_ROLE_CURRENT_TASK_INDEX says hello"')
    page.locator(".role").nth(1).get_by_role("button", name="Add variable").click()
    page.locator('input[name="roles-1-env-0-key"]').fill("GREETING")
    page.locator('input[name="roles-1-env-0-value"]').fill(PAYLOADS[1])
    wait_until(lambda: "GREETING:" in yaml_editor.input_value() and "name: dist-e2e" in yaml_editor.input_value(),
               what="the YAML editor to follow the form")
    text = yaml_editor.input_value()
    assert "  ps:" in text and "  worker:" in text and "echo ps says hello" in text

    # The form follows the YAML: two workers.
    worker_part = text[text.index("  worker:"):]
    yaml_editor.fill(text[:text.index("  worker:")] + worker_part.replace("instances: 1", "instances: 2", 1))
    wait_until(lambda: page.locator("#roles-1-instances").input_value() == "2", what="the form to follow the YAML")

    page.get_by_role("button", name="Check").click()
    page.get_by_text("the job can be submitted").wait_for()
    page.screenshot(path=str(SCREENSHOTS / "portal_submit_distributed_form.png"), full_page=True, caret="initial")
    with page.expect_download() as download:
        page.get_by_role("button", name="Export YAML").click()
    assert download.value.suggested_filename == "dist-e2e.yaml"
    assert "instances: 2" in download.value.path().read_text()
    page.get_by_role("button", name="Submit", exact=True).click()
    page.wait_for_url(re.compile(r".*/jobs/\d+$"))
    # The job's page follows it to the end (it refreshes itself while the job is live).
    page.locator('#job-state[data-state="SUCCEEDED"]').wait_for(timeout=scaled_ms(60))
    job = server.admin().wait(job_id_of(page.url), timeout=scaled(60))
    assert job.state == "SUCCEEDED", job
    logs = server.admin().logs(job.id, task="worker/1").decode()
    assert "worker 1 says hello" in logs
    assert dialogs == []


def test_a_clone_runs_with_the_real_secret_the_page_never_holds(server, browser_page):
    admin = server.admin()
    original = admin.submit(
        "name: with-secret\n"
        f"secrets: {{token: {SECRET}}}\n"
        "taskRoles:\n"
        "  main:\n"
        "    commands: ['echo \"the secret is <% $secrets.token %>\"']\n"
    ).id
    page = browser_page
    sign_in_with_token(page, server, admin_token(server), f"/submit?clone={original}")
    assert SECRET not in page.content() and "******" in page.locator("#yaml").input_value()
    page.screenshot(path=str(SCREENSHOTS / "portal_submit_clone.png"), caret="initial")
    page.locator("#name").fill("the-clone")
    wait_until(lambda: "name: the-clone" in page.locator("#yaml").input_value(), what="the YAML to follow")
    page.get_by_role("button", name="Submit", exact=True).click()
    page.wait_for_url(re.compile(r".*/jobs/\d+$"))
    assert SECRET not in page.locator("#job-state").inner_text()  # the job file's part shows it masked
    clone = admin.wait(job_id_of(page.url), timeout=scaled(60))
    assert clone.state == "SUCCEEDED" and clone.name == "the-clone" and clone.id != original
    assert f"the secret is {SECRET}" in admin.logs(clone.id).decode()
