"""A real browser for the portal's end-to-end tests: Debian's chromium, driven by
Playwright's Python package (never `playwright install`, which downloads a browser).

The launch flags are the ones this machine needs (``/work/shared/notes/browser-tests.md``
in the project's notes): headless, no sandbox as root, and no background networking,
which the closed network here refuses. Each test's page saves a screenshot when the test
ends, into ``$TRAINYARD_SCREENSHOTS`` (default ``build/screenshots``), named after it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deadlines import scaled_ms

from e2e.server import Server

CHROMIUM = os.environ.get("TRAINYARD_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
REQUIRE_BROWSER = os.environ.get("TRAINYARD_REQUIRE_BROWSER") == "1"
REPO_ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = Path(os.environ.get("TRAINYARD_SCREENSHOTS", REPO_ROOT / "build" / "screenshots"))
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--disable-dev-shm-usage"]


# Per module, or per run of consecutive ``idle_cluster`` modules, never per worker:
# Playwright's sync API keeps an asyncio loop running in the main thread while it is started,
# and the tests a worker runs after a browser module (asyncio.run, anyio.run) then fail
# "cannot be called from a running event loop" (CI, once the e2e modules sharing a server ran
# in one group before the api and cli tests). The ``idle_cluster`` modules (one xdist group,
# none of them running an event loop of its own) share one browser, which conftest.py's
# ``pytest_runtest_teardown`` closes as soon as the next test is not one of theirs: a launch
# saved per module.
SHARED_BROWSER = pytest.StashKey[tuple[Any, Any]]()  # (the Playwright, its browser)


def _launch() -> tuple[Any, Any]:
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    try:
        return playwright, playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
    except BaseException:
        playwright.stop()
        raise


def _close(launched: tuple[Any, Any]) -> None:
    playwright, browser = launched
    try:
        browser.close()
    finally:
        playwright.stop()


def close_shared_browser(config: pytest.Config) -> None:
    """Close the browser the ``idle_cluster`` modules share, if one is open."""
    launched = config.stash.get(SHARED_BROWSER, None)
    if launched is not None:
        del config.stash[SHARED_BROWSER]
        _close(launched)


@pytest.fixture(scope="module")
def chromium(request: pytest.FixtureRequest) -> Iterator[Any]:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError as exc:
        if REQUIRE_BROWSER:
            raise
        pytest.skip(f"playwright is not installed: {exc}")
    if not Path(CHROMIUM).exists():
        if REQUIRE_BROWSER:
            raise AssertionError(f"TRAINYARD_REQUIRE_BROWSER=1 but there is no chromium at {CHROMIUM}")
        pytest.skip(f"no chromium at {CHROMIUM} (Debian's package `chromium`)")
    if request.node.get_closest_marker("idle_cluster") is not None:
        if SHARED_BROWSER not in request.config.stash:
            request.config.stash[SHARED_BROWSER] = _launch()
        yield request.config.stash[SHARED_BROWSER][1]
        return
    launched = _launch()
    try:
        yield launched[1]
    finally:
        _close(launched)


@pytest.fixture
def browser_page(chromium, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A fresh browser context (no cookies) and page; its screenshot is saved at the end,
    pass or fail. Browser errors in the page's scripts fail the test, and so do failed
    requests, except the statuses a test names with ``@pytest.mark.refused_statuses(403)``
    (a test that checks a refusal)."""
    context = chromium.new_context(viewport={"width": 1360, "height": 900})
    context.set_default_timeout(scaled_ms(20))  # its pages' waits, a tab it opens included
    page = context.new_page()
    script_errors: list[str] = []
    page.on("pageerror", lambda error: script_errors.append(str(error)))
    marker = request.node.get_closest_marker("refused_statuses")
    expected = tuple(f"the server responded with a status of {code} " for code in (marker.args if marker else ()))
    page.on("console", lambda msg: script_errors.append(msg.text)
            if msg.type == "error" and not any(status in msg.text for status in expected) else None)
    try:
        yield page
    finally:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
        try:
            # caret="initial": hiding the text cursor injects a <style>, which the portal's
            # Content-Security-Policy refuses (and reports as a page error).
            page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True, caret="initial")
        finally:
            context.close()
    assert not script_errors, f"the page's scripts reported errors: {script_errors}"


def admin_token(server: Server) -> str:
    return str(json.loads((server.home / "client.json").read_text())["token"])


def sign_in_with_token(page: Any, server: Server, token: str, next_path: str = "/") -> None:
    page.goto(f"{server.url}/signin?next={next_path}")
    page.get_by_text("Sign in with a token instead").click()
    page.locator('input[name="token"]').fill(token)
    page.get_by_role("button", name="Sign in with token").click()
    page.wait_for_url(f"{server.url}{next_path}")


def sign_in_with_password(page: Any, server: Server, name: str, password: str, next_path: str = "/") -> None:
    page.goto(f"{server.url}/signin?next={next_path}")
    page.locator('input[name="username"]').fill(name)
    page.locator('input[name="password"]').fill(password)
    page.get_by_role("button", name="Sign in", exact=True).click()
    page.wait_for_url(f"{server.url}{next_path}")
