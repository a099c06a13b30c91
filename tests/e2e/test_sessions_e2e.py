"""Interactive JupyterLab sessions on a real ``yard up`` (issue 18): ``yard dev`` starts the
real ``jupyterlab`` as a job; through the server's authenticated proxy a test lists the
kernelspecs, starts a kernel and runs code over its WebSocket; nobody else gets in; the
session is renewed and stopped from the CLI, and an idle one is reported and culled.

As root, tasks run under their users' own accounts, which cannot run a Python under
/root: the session Python is then CI's non-root one (``TRAINYARD_TEST_NONROOT_PYTHON``,
with JupyterLab, as .ci/run installs it).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from deadlines import scaled, scaled_ms
from podman_support import needs_podman
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from e2e.browser import SCREENSHOTS, sign_in_with_token
from e2e.jupyter import bearer, run_code
from e2e.server import Server, ensure_user, running_server, wait_until
from e2e.shared import shared_server, spend
from trainyard.client import Client

pytestmark = [pytest.mark.e2e, pytest.mark.shares_server]  # one `yard up` for the file (conftest.py)

SESSION_PYTHON = (os.environ.get("TRAINYARD_TEST_NONROOT_PYTHON") if os.geteuid() == 0 else None) or sys.executable


@pytest.fixture(autouse=True)
def _a_python_task_accounts_can_run() -> None:
    if os.geteuid() == 0 and not os.environ.get("TRAINYARD_TEST_NONROOT_PYTHON"):
        why = ("as root, sessions' tasks run under their users' accounts: set TRAINYARD_TEST_NONROOT_PYTHON to "
               "a Python with JupyterLab that every account can run (.ci/run makes one)")
        if os.environ.get("TRAINYARD_REQUIRE_NONROOT"):
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture
def lab_server(request: pytest.FixtureRequest, database_url: str, tmp_path_factory) -> Iterator[Server]:
    """A server whose sessions run JupyterLab from the site's Python: on SQLite the one the
    module's tests that take it share (tests/e2e/shared.py)."""
    options: dict[str, Any] = {"gpus": 2, "extra_env": {"TRAINYARD_SESSION_PYTHON": SESSION_PYTHON}}
    if database_url.startswith("sqlite"):
        yield from shared_server(request, "lab", **options)
        return
    with running_server(tmp_path_factory.mktemp("home"), database_url=database_url, **options) as srv:
        yield srv


# The site's session watch on the module's other server (``server``): JupyterLab read every
# second, a session idle for 3 s reported, culled only after an hour (the idle test's settings;
# the others' sessions may be reported idle too, which they do not look at).
WATCHED = {"TRAINYARD_SESSION_CHECK_INTERVAL_SECONDS": "1", "TRAINYARD_SESSION_IDLE_REPORT_MINUTES": "0.05",
           "TRAINYARD_SESSION_IDLE_CULL_MINUTES": "60"}


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    """The module's server with no site-wide JupyterLab (sessions name an environment), whose
    sessions are watched as ``WATCHED`` says (tests/e2e/shared.py)."""
    yield from shared_server(request, "", extra_env=WATCHED)


def tokens(server: Server) -> dict[str, str]:
    admin = server.admin()
    found = {"admin": admin._http.headers["Authorization"].split()[1]}
    for name in ("alice", "bob"):
        ensure_user(admin, name)
        found[name] = admin.create_token(user=name).token
    return found


def test_a_session_started_from_the_cli_runs_code_through_the_proxy_for_its_owner_alone(lab_server: Server) -> None:
    who = tokens(lab_server)
    started = lab_server.yard("dev", "--gpu", "0.5", "--hours", "2", "--wait", token=who["alice"])
    assert started.returncode == 0, started.stderr + lab_server.log()[-3000:]
    assert started.stdout.startswith("session ") and "is open: " in started.stdout, started.stdout
    session = int(started.stdout.split()[1])
    url = f"{lab_server.url}/sessions/{session}/"
    assert started.stdout.strip().endswith(url)

    specs = httpx.get(url + "api/kernelspecs", headers=bearer(who["alice"]), timeout=scaled(30))
    assert specs.status_code == 200 and "python3" in specs.json()["kernelspecs"]
    # The kernel runs in the session's task: it sees the one GPU the session was given.
    task = Client(lab_server.url, who["alice"]).job(session).attempts[-1].tasks[0]
    assert run_code(lab_server, who["alice"], session, 'import os; os.environ["CUDA_VISIBLE_DEVICES"]') == repr(
        ",".join(str(g) for g in task.gpus))

    # Nobody else gets in: not bob, not the admin (sessions are their owners' by default),
    # not a request without credentials (a browser is sent to sign in first).
    for name in ("bob", "admin"):
        refused = httpx.get(url + "api/kernelspecs", headers=bearer(who[name]), timeout=scaled(30))
        assert refused.status_code == 404 and "no session" in refused.json()["detail"]
        with pytest.raises(InvalidStatus) as denied:
            connect(f"ws{url[4:]}api/events/subscribe", additional_headers=bearer(who[name]), open_timeout=scaled(30))
        assert denied.value.response.status_code == 404
    assert httpx.get(url + "api/kernelspecs", timeout=scaled(30)).status_code == 401
    browser = httpx.get(url + "lab", headers={"Accept": "text/html"}, timeout=scaled(30))
    assert browser.status_code == 303 and browser.headers["location"].startswith("/signin?next=/sessions/")
    # JupyterLab itself answers no one without the token only Trainyard holds.
    port = task.ports["lab"][0]
    direct = httpx.get(f"http://127.0.0.1:{port}/sessions/{session}/api/kernelspecs", timeout=scaled(30))
    assert direct.status_code == 403

    listed = lab_server.yard("dev", "list", token=who["alice"])
    assert listed.returncode == 0 and f"{session}" in listed.stdout and "RUNNING" in listed.stdout, listed.stdout
    assert lab_server.yard("dev", "list", token=who["bob"]).stdout.count("\n") == 1  # the header alone
    renewed = lab_server.yard("dev", "renew", str(session), "--hours", "3", token=who["alice"])
    assert renewed.returncode == 0 and re.search(r"renewed: it ends in (2:59:\d\d|3:00:00)", renewed.stdout), (
        renewed.stdout + renewed.stderr)
    too_long = lab_server.yard("dev", "renew", str(session), "--hours", "1000", token=who["alice"])
    assert too_long.returncode != 0 and "at most 168 h" in too_long.stderr
    events = [e.kind for e in Client(lab_server.url, who["alice"]).job(session).events]
    assert "session-renewed" in events and "port-opened" in events

    stopped = lab_server.yard("dev", "stop", str(session), token=who["alice"])
    assert stopped.returncode == 0, stopped.stderr
    alice = Client(lab_server.url, who["alice"])
    wait_until(lambda: alice.job(session).state == "STOPPED", timeout=30, what="the session to stop")
    assert httpx.get(url + "api/kernelspecs", headers=bearer(who["alice"]), timeout=scaled(30)).status_code == 409


def test_new_jupyterlab_in_the_portal_opens_the_lab_in_the_browser(lab_server: Server, browser_page: Any) -> None:
    who = tokens(lab_server)
    page = browser_page
    sign_in_with_token(page, lab_server, who["alice"], "/notebooks")
    page.locator('input[name="gpu"]').fill("0.5")
    page.get_by_role("button", name="New JupyterLab").click()
    page.wait_for_url(re.compile(r".*/notebooks\?started=\d+$"))
    session = int(page.url.rsplit("=", 1)[1])
    assert f"session {session} is starting" in page.locator("main").inner_text()
    # The table refreshes itself until the session runs; then it offers to open it.
    opener = page.locator(f'a[data-open="{session}"]')
    opener.wait_for(timeout=scaled_ms(90))
    assert opener.get_attribute("href") == f"/sessions/{session}/lab"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "notebooks_page.png"), full_page=True, caret="initial")

    refused: list[str] = []
    with page.context.expect_page() as opened:
        opener.click()
    lab = opened.value
    lab.on("response", lambda r: refused.append(f"{r.status} {r.url}") if r.status in (401, 403, 502) else None)
    lab.locator("#jp-main-dock-panel").wait_for(timeout=scaled_ms(90))  # JupyterLab's own shell, drawn by its scripts
    lab.get_by_text("Python 3 (ipykernel)").first.wait_for(timeout=scaled_ms(60))  # the launcher, from the kernelspecs
    assert lab.url.startswith(f"{lab_server.url}/sessions/{session}/lab")
    lab.screenshot(path=str(SCREENSHOTS / "jupyterlab_session.png"), caret="initial")
    assert refused == [], refused
    lab.close()
    # The session's job page opens it too.
    page.goto(f"{lab_server.url}/jobs/{session}")
    assert page.locator("#open-jupyterlab").get_attribute("href") == f"/sessions/{session}/lab"


def test_a_session_runs_in_an_environment_of_the_users_choice(server: Server) -> None:
    """No site-wide JupyterLab here (as root, yard up's own Python is private to root): a
    session must name an environment with JupyterLab, and runs with its interpreter."""
    who = tokens(server)
    if os.geteuid() == 0:  # else yard up's own Python is everyone's, and the site's JupyterLab
        refused = server.yard("dev", token=who["alice"])
        assert refused.returncode != 0 and "environment: this site has no Python with JupyterLab" in refused.stderr, (
            refused.stderr)
    prefix = str(Path(SESSION_PYTHON).parent.parent)
    server.admin().create_environment("lab", base_path=prefix)
    started = server.yard("dev", "--environment", "lab", "--wait", token=who["alice"])
    assert started.returncode == 0, started.stderr
    session = int(started.stdout.split()[1])
    assert run_code(server, who["alice"], session, "import sys; sys.prefix") == repr(prefix)


@needs_podman
def test_a_session_runs_in_a_container_of_an_image_with_an_environment(server: Server, image: str) -> None:
    """The image (Debian with Python, no JupyterLab) and an environment with JupyterLab,
    bound into the container: the kernel runs in the container, with the environment's Python."""
    who = tokens(server)
    prefix = str(Path(SESSION_PYTHON).parent.parent)
    server.admin().create_environment("boxed-lab", base_path=prefix)  # another than the test above's, on this server
    started = server.yard("dev", "--image", image, "--environment", "boxed-lab", "--wait", token=who["alice"])
    assert started.returncode == 0, started.stderr + server.log()[-2000:]
    session = int(started.stdout.split()[1])
    code = 'import os, sys; (os.path.exists("/run/.containerenv"), sys.prefix)'
    assert run_code(server, who["alice"], session, code) == repr((True, prefix))
    Client(server.url, who["alice"]).stop_session(session)
    alice = Client(server.url, who["alice"])
    wait_until(lambda: alice.job(session).state == "STOPPED", timeout=60, what="the session to stop")


# Last in the file: it restarts the module's server with another cull, and that server goes
# with it (``spend``); a test after it would have to start a new one.
def test_an_idle_session_is_reported_then_culled_where_the_site_says_so(
        server: Server, request: pytest.FixtureRequest) -> None:
    # Reported after 3 s idle (checked every second) where the site also culls, but only
    # after an hour: the report comes first however late a loaded machine lets the controller
    # see JupyterLab run. Then the site shortens the cull to 3 s (a restart: the server's
    # settings, not the session, change) and the session, idle longer than that, is culled.
    admin = server.admin()
    admin.create_environment("idle-lab", base_path=str(Path(SESSION_PYTHON).parent.parent))
    session = admin.start_session(name="idle-lab", environment="idle-lab").id
    # JupyterLab's start (as long as the other lab tests give it), then its idle report.
    wait_until(lambda: admin.job(session).state != "WAITING" and admin.session(session).lastActivity,
               timeout=120, what=f"the session's JupyterLab to be read ({admin.session(session)!r})")
    wait_until(lambda: "session-idle" in [e.kind for e in admin.job(session).events], timeout=30,
               what=f"the idle session to be reported ({admin.session(session)!r})")
    reported = next(e.message for e in admin.job(session).events if e.kind == "session-idle")
    assert "idle: no activity for" in reported and "it is stopped after 1 h 0 min idle" in reported, reported
    assert admin.job(session).state == "RUNNING"  # an hour is far off

    spend(request)
    server.stop()  # the session runs on (Ctrl-C stops the server, not the jobs)
    server.extra_env = tuple({**dict(server.extra_env), "TRAINYARD_SESSION_IDLE_CULL_MINUTES": "0.05"}.items())
    server.start()
    admin = server.admin()
    wait_until(lambda: admin.job(session).state in ("STOPPING", "STOPPED"), timeout=60,
               what=f"the idle session to be culled ({admin.session(session)!r})")
    job = admin.job(session)
    kinds = [e.kind for e in job.events]
    assert "session-idle" in kinds, kinds
    assert "idle for" in job.message and "this site stops sessions idle for 3 s" in job.message, job.message
