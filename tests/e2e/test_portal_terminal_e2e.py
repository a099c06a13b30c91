"""The job page's terminal in a real Chromium: xterm.js on the exec WebSocket, signed in by
the portal's session, a shell in the running task that a person types into."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.browser import SCREENSHOTS, admin_token, sign_in_with_token
from e2e.server import Server
from e2e.test_exec_e2e import PROCESS_JOB, Running

pytestmark = [pytest.mark.e2e, pytest.mark.idle_cluster]  # the worker's shared `yard up` (conftest.py)

SCREEN = "document.querySelector('#terminal .xterm-rows').innerText"


def wait_for_screen(page: Any, what: str, test: str, arg: str = "") -> None:
    """Wait until the JavaScript ``test`` holds of the terminal's text (``screen``; ``arg`` its
    argument); when Playwright's wait times out, the failure says what the terminal and the
    page's status line showed (a bare timeout left a CI failure untraced)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        page.wait_for_function(f"arg => {{ const screen = {SCREEN}; return {test}; }}", arg=arg)
    except PlaywrightTimeout:
        screen = page.locator("#terminal .xterm-rows").inner_text(timeout=1000)
        status = page.locator("#terminal-status").inner_text(timeout=1000)
        raise AssertionError(f"waited for {what}; the terminal showed {screen!r}, its status {status!r}") from None


def test_the_job_page_opens_a_terminal_in_the_running_task(server: Server, browser_page: Any) -> None:
    running = Running(server, PROCESS_JOB)
    page = browser_page
    sign_in_with_token(page, server, running.alice, f"/jobs/{running.job}")
    page.get_by_role("button", name="Open a terminal").click()
    screen = page.locator("#terminal .xterm-rows")
    wait_for_screen(page, "the shell's prompt", "/\\$\\s*$/.test(screen.trim())")
    page.locator("#terminal").click()
    page.keyboard.type("echo gpus=$CUDA_VISIBLE_DEVICES in $PWD")
    page.keyboard.press("Enter")
    work_dir = running.said.split()[1].removeprefix("pwd=")
    wait_for_screen(page, "the command's output", "screen.includes(arg)", arg=f"gpus=0 in {work_dir}")
    page.keyboard.type("exit 5")
    page.keyboard.press("Enter")
    page.get_by_text("The shell exited with status 5.").first.wait_for()
    # xterm.js draws its rows on the next animation frame: the page's status line can come
    # first (CI saw the rows still without the exit), so the terminal itself is waited for.
    wait_for_screen(page, "the exit in the terminal", "screen.includes(arg)", arg="exited with status 5")
    assert "exited with status 5" in screen.inner_text()
    assert running.events() == ["alice opened a shell in task main/0"]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "the_job_pages_terminal.png"), full_page=True, caret="initial")

    # An admin's page of Alice's job offers none: the terminal would run with the admin's session.
    page.context.clear_cookies()
    sign_in_with_token(page, server, admin_token(server), f"/jobs/{running.job}")
    assert page.get_by_role("button", name="Open a terminal").count() == 0
