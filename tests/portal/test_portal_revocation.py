"""Issue 27, findings 5 and 6, in process: revoking a credential ends what came from it (the
browser sessions signed in with it, a disabled user's sessions for good, open connections
within about a second), a browser session makes a token only with the password again, and
the limit on sign-in tries holds however the name is written, for tries sent at once, and
across a restart. The same routes against a real root ``yard up`` are in
tests/e2e/test_attack_auth_e2e.py."""

from __future__ import annotations

import asyncio
import re
import threading
from concurrent.futures import ThreadPoolExecutor

from api.harness import Api
from deadlines import scaled
from fastapi.testclient import TestClient

from portal.harness import PASSWORDS, browser, csrf_of, signed_in
from trainyard.api.app import create_app
from trainyard.core.clock import SystemClock
from trainyard.services.auth import hash_token
from trainyard.services.sign_in_limits import SignInLimiter, keys_for
from trainyard.web.context import AppContext
from trainyard.web.revocation import OpenConnections


def _token_signed_in(api: Api, token: str) -> TestClient:
    client = browser(api)
    assert client.post("/signin", data={"token": token}).status_code == 303
    return client


def _make_token(client: TestClient, current: str | None) -> tuple[int, str | None]:
    data = {"csrf": csrf_of(client.get("/account").text), "name": "from the browser"}
    if current is not None:
        data["current"] = current
    answer = client.post("/account/tokens", data=data)
    made = re.search(r'value="(ty_[^"]+)"', answer.text)
    return answer.status_code, made.group(1) if made else None


def test_revoking_a_token_ends_the_browser_sessions_signed_in_with_it(api: Api) -> None:
    made = api.user.post("/api/v1/tokens", json={"name": "for the browser"}).json()["token"]
    browser_session = _token_signed_in(api, made)
    other = signed_in(api, "alice")  # with her password: not from that token
    assert browser_session.get("/account").status_code == 200
    token_id = next(t["id"] for t in api.user.get("/api/v1/tokens").json() if t["name"] == "for the browser")
    assert api.user.delete(f"/api/v1/tokens/{token_id}").status_code == 200
    assert browser_session.get("/account").status_code == 303  # to the sign-in page
    assert browser_session.post("/account/tokens", data={"name": "x", "current": made}).status_code in (303, 401)
    assert other.get("/account").status_code == 200


def test_a_browser_session_makes_a_token_only_with_the_password_given_again(api: Api) -> None:
    alice = signed_in(api, "alice")
    assert _make_token(alice, None) == (403, None)
    assert _make_token(alice, "not her password")[0] == 403
    status, token = _make_token(alice, PASSWORDS["alice"])
    assert status == 200 and token is not None
    assert api.client(token).get("/api/v1/me").json()["name"] == "alice"
    # A user without a password gives a token of theirs instead; another user's is no good.
    assert api.admin.delete("/api/v1/users/alice/password").status_code == 200
    by_token = _token_signed_in(api, api.user_token)
    assert _make_token(by_token, api.admin_token)[0] == 403
    assert _make_token(by_token, api.user_token)[0] == 200


def test_a_session_of_a_user_without_a_password_sets_one_only_with_a_token_of_theirs(api: Api) -> None:
    assert api.admin.delete("/api/v1/users/alice/password").status_code == 200
    session = _token_signed_in(api, api.user_token)
    new = {"password": "chosen by a thief", "again": "chosen by a thief"}
    stolen = session.post("/account/password", data={"csrf": csrf_of(session.get("/account").text), **new})
    assert stolen.status_code == 422 and 'data-field="current"' in stolen.text
    assert browser(api).post("/signin", data={"username": "alice", "password": new["password"]}).status_code == 401
    mine = session.post("/account/password", data={"csrf": csrf_of(session.get("/account").text),
                                                   "current": api.user_token, **new})
    assert mine.status_code == 200 and "your password is changed" in mine.text


def test_wrong_current_passwords_count_against_the_sign_in_limit(api: Api) -> None:
    alice = signed_in(api, "alice")
    for _ in range(5):
        wrong = alice.post("/account/password", data={"csrf": csrf_of(alice.get("/account").text), "current": "guess",
                                                      "password": "new password", "again": "new password"})
        assert wrong.status_code == 422
    limited = alice.post("/account/password", data={"csrf": csrf_of(alice.get("/account").text),
                                                    "current": PASSWORDS["alice"], "password": "new password",
                                                    "again": "new password"})
    assert limited.status_code == 429


def test_wrong_passwords_given_to_make_a_token_count_against_the_sign_in_limit(api: Api) -> None:
    alice = signed_in(api, "alice")
    for _ in range(5):
        assert _make_token(alice, "a guess")[0] == 403
    assert _make_token(alice, PASSWORDS["alice"])[0] == 429
    assert browser(api).post("/signin", data={"username": "alice", "password": PASSWORDS["alice"]}).status_code == 429


def test_disabling_ends_a_users_sessions_and_enabling_does_not_bring_them_back(api: Api) -> None:
    alice = signed_in(api, "alice")
    assert api.admin.post("/api/v1/users/alice/disable").status_code == 200
    assert alice.get("/").status_code == 303
    assert api.admin.post("/api/v1/users/alice/enable").status_code == 200
    assert alice.get("/").status_code == 303
    assert signed_in(api, "alice").get("/").status_code == 200  # she signs in again


def test_a_name_written_with_spaces_is_the_same_user_for_the_limit(api: Api) -> None:
    for spaces in range(1, 6):
        answer = browser(api).post("/signin", data={"username": "alice" + " " * spaces, "password": "wrong"})
        assert answer.status_code == 401
    for written in ("alice", " alice", "alice" + " " * 30, "alice\t"):
        refused = browser(api).post("/signin", data={"username": written, "password": PASSWORDS["alice"]})
        assert refused.status_code == 429, written


def test_a_token_sign_in_does_not_clear_the_count_of_a_name_typed_beside_it(api: Api) -> None:
    for _ in range(4):
        assert browser(api).post("/signin", data={"username": "alice", "password": "wrong"}).status_code == 401
    # Admin's own token, with alice's name typed beside it: signs the admin in, clears nothing of hers.
    assert browser(api).post("/signin", data={"username": "alice", "token": api.admin_token}).status_code == 303
    assert browser(api).post("/signin", data={"username": "alice", "password": "wrong"}).status_code == 401
    assert browser(api).post("/signin", data={"username": "alice", "password": PASSWORDS["alice"]}).status_code == 429


def test_the_limit_holds_for_thirty_tries_at_once(db) -> None:
    limiter = SignInLimiter(db, SystemClock())
    keys = keys_for("192.0.2.7", "alice")
    answers: list[bool] = []
    start = threading.Barrier(30)

    def attempt() -> None:
        start.wait()
        answers.append(limiter.try_sign_in(keys) is None)

    threads = [threading.Thread(target=attempt) for _ in range(30)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers.count(True) == 5 and answers.count(False) == 25


def test_the_limit_outlives_a_restart(api: Api) -> None:
    for _ in range(5):
        assert browser(api).post("/signin", data={"username": "alice", "password": "wrong"}).status_code == 401
    restarted = AppContext(db=api.ctx.db, backend=api.ctx.backend, clock=api.ctx.clock)
    again = Api(create_app(restarted), restarted, api.admin_token, api.user_token)
    assert browser(again).post("/signin", data={"username": "alice", "password": PASSWORDS["alice"]}).status_code == 429


def test_open_connections_end_within_seconds_of_their_credentials_revocation(api: Api) -> None:
    made = api.user.post("/api/v1/tokens", json={"name": "held open"}).json()["token"]
    token_id = next(t["id"] for t in api.user.get("/api/v1/tokens").json() if t["name"] == "held open")
    cookie = signed_in(api, "alice").cookies["trainyard_session"]
    connections = OpenConnections(api.ctx.db, api.ctx.clock, seconds=0.2)

    async def scenario() -> bool:
        async with connections.watch("token:" + hash_token(made)) as by_token, \
                connections.watch("cookie:" + hash_token(cookie)) as by_cookie, \
                connections.watch("token:" + hash_token(api.admin_token)) as unrelated:
            await asyncio.sleep(0.5)
            assert not (by_token.is_set() or by_cookie.is_set())
            # Awaited: each watch ends on its recheck after the revocation (wait_for's deadline
            # only turns a recheck that never comes into a failure).
            await asyncio.to_thread(api.user.delete, f"/api/v1/tokens/{token_id}")
            await asyncio.wait_for(by_token.wait(), scaled(10))
            await asyncio.to_thread(api.admin.put, "/api/v1/users/alice/password", json={"password": "a new one!"})
            await asyncio.wait_for(by_cookie.wait(), scaled(10))
            return unrelated.is_set()

    # In a thread of its own: the main thread may hold a running loop already (Playwright's
    # sync API keeps one there once the browser tests ran, as in the whole suite).
    with ThreadPoolExecutor(1) as pool:
        unrelated_ended = pool.submit(asyncio.run, scenario()).result()
    assert not unrelated_ended
    assert len(connections) == 0
