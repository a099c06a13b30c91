"""The portal in a real browser: sign in with a user's token, set a password, sign out,
sign in with it; the home page after each."""

from __future__ import annotations

import pytest

from e2e.browser import sign_in_with_password, sign_in_with_token

# The worker's shared `yard up` (conftest.py): the password is set on a user of this test's
# own, whom no other test signs in as.
pytestmark = [pytest.mark.e2e, pytest.mark.idle_cluster]


def test_sign_in_set_a_password_and_sign_in_with_it(server, browser_page):
    token = server.add_users("portia")["portia"]
    page = browser_page
    page.goto(server.url + "/account")
    assert page.url.startswith(server.url + "/signin?next=/account")
    sign_in_with_token(page, server, token, "/account")
    # No password yet: she gives a token of hers instead.
    page.locator('form[action="/account/password"] input[name="current"]').fill(token)
    page.locator('input[name="password"]').fill("a good password")
    page.locator('input[name="again"]').fill("a good password")
    page.get_by_role("button", name="Set password").click()
    assert page.get_by_role("status").inner_text() == "your password is changed"
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(server.url + "/signin")
    sign_in_with_password(page, server, "portia", "a good password")
    assert page.get_by_role("heading", name="GPUs allocated").is_visible()
    assert page.locator(".card .big").first.inner_text() == "0 / 4"
