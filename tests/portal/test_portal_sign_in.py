"""Signing in and out of the portal: passwords, tokens, the session cookie, the limit on
failed tries, and the pages a signed-out browser is sent away from."""

from __future__ import annotations

import pytest

from portal.harness import PASSWORDS, browser, csrf_of, signed_in
from trainyard.web.callers import COOKIE


def test_signed_out_pages_send_to_sign_in_with_the_way_back(api):
    answer = browser(api).get("/account?tab=password")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/signin?next=/account%3Ftab%3Dpassword"


def test_sign_in_with_a_password_sets_a_safe_cookie_and_shows_home(api):
    client = browser(api)
    answer = client.post("/signin", data={"username": "alice", "password": PASSWORDS["alice"], "next": "/jobs"})
    assert answer.status_code == 303 and answer.headers["location"] == "/jobs"
    cookie = answer.headers["set-cookie"]
    assert f"{COOKIE}=" in cookie and "HttpOnly" in cookie and "SameSite=lax" in cookie
    assert "Secure" not in cookie  # plain HTTP here; over HTTPS it is Secure
    home = client.get("/")
    assert home.status_code == 200 and "alice" in home.text
    assert "default-src 'self'" in home.headers["content-security-policy"]


def test_sign_in_with_a_token(api):
    client = browser(api)
    answer = client.post("/signin", data={"token": api.user_token})
    assert answer.status_code == 303
    assert "alice" in client.get("/").text


@pytest.mark.parametrize("username, password", [("alice", "wrong"), ("nobody", "whatever1")])
def test_a_failed_sign_in_says_the_same_whatever_was_wrong(api, username, password):
    answer = browser(api).post("/signin", data={"username": username, "password": password})
    assert answer.status_code == 401
    assert "wrong user name and password, or token" in answer.text
    assert COOKIE not in answer.headers.get("set-cookie", "")


@pytest.mark.postgres
def test_failed_sign_ins_are_limited_per_name(api):
    client = browser(api)
    for _ in range(5):
        assert client.post("/signin", data={"username": "alice", "password": "wrong"}).status_code == 401
    refused = client.post("/signin", data={"username": "alice", "password": PASSWORDS["alice"]})
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0


def test_next_never_leads_to_another_site(api):
    for target in ("//evil.example/x", "https://evil.example/", "/\\evil.example"):
        answer = browser(api).post("/signin", data={"username": "alice", "password": PASSWORDS["alice"],
                                                    "next": target})
        assert answer.headers["location"] == "/"


@pytest.mark.postgres
def test_sign_out_ends_the_session_for_good(api):
    client = signed_in(api, "alice")
    cookie = client.cookies[COOKIE]
    csrf = csrf_of(client.get("/").text)
    assert client.post("/signout", data={"csrf": csrf}).status_code == 303
    replay = browser(api)
    replay.cookies.set(COOKIE, cookie)
    assert replay.get("/").status_code == 303


def test_sign_out_without_the_form_secret_is_refused(api):
    client = signed_in(api, "alice")
    assert client.post("/signout", data={}).status_code == 403
    assert client.get("/").status_code == 200


def test_a_form_from_another_site_is_refused_even_with_the_secret(api):
    client = signed_in(api, "alice")
    csrf = csrf_of(client.get("/").text)
    answer = client.post("/signout", data={"csrf": csrf}, headers={"Origin": "https://evil.example"})
    assert answer.status_code == 403


def test_a_disabled_user_is_signed_out(api):
    client = signed_in(api, "alice")
    assert api.admin.post("/api/v1/users/alice/disable").status_code == 200
    assert client.get("/").status_code == 303


def test_changing_the_password(api):
    client = signed_in(api, "alice")
    csrf = csrf_of(client.get("/account").text)
    wrong = client.post("/account/password", data={"csrf": csrf, "current": "nope", "password": "new password",
                                                   "again": "new password"})
    assert wrong.status_code == 422 and 'data-field="current"' in wrong.text
    right = client.post("/account/password", data={"csrf": csrf, "current": PASSWORDS["alice"],
                                                    "password": "new password", "again": "new password"})
    assert right.status_code == 200 and "your password is changed" in right.text
    assert browser(api).post("/signin", data={"username": "alice", "password": "new password"}).status_code == 303


def test_unknown_pages_answer_html_and_api_errors_stay_json(api):
    client = signed_in(api, "alice")
    page = client.get("/no-such-page")
    assert page.status_code == 404 and page.headers["content-type"].startswith("text/html")
    assert api.user.get("/api/v1/jobs/999").json()["detail"] == "no job 999"
