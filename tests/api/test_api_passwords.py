"""Portal passwords over HTTP: a user sets their own with the current one, an admin sets or
clears anyone's, and a change signs the user's browsers out."""

from __future__ import annotations

import base64

import pytest
from api.harness import Api

from trainyard.core.clock import SystemClock
from trainyard.services import web_sessions
from trainyard.services.auth import get_user


def sessions_of(api: Api, name: str) -> web_sessions.SignedIn:
    """A browser session of ``name``, signed in with their token."""
    with api.ctx.db.session() as session:
        signed_in = web_sessions.sign_in_with_token(session, api.admin_token if name == "admin" else api.user_token,
                                                    clock=SystemClock())
    assert signed_in is not None
    return signed_in


def live(api: Api, cookie: str) -> bool:
    with api.ctx.db.session() as session:
        return web_sessions.session_for_cookie(session, cookie, clock=SystemClock()) is not None


def test_a_user_sets_their_first_password_then_needs_it_to_change_it(api: Api) -> None:
    first = api.user.put("/api/v1/users/alice/password", json={"password": "first password"})
    assert first.status_code == 200 and first.json()["hasPassword"] is True
    assert api.user.get("/api/v1/me").json()["hasPassword"] is True
    refused = api.user.put("/api/v1/users/alice/password", json={"password": "second password"})
    assert refused.status_code == 403 and refused.json()["detail"] == "the current password is wrong"
    wrong = api.user.put("/api/v1/users/alice/password", json={"password": "second password", "current": "nope"})
    assert wrong.status_code == 403
    ok = api.user.put("/api/v1/users/alice/password",
                      json={"password": "second password", "current": "first password"})
    assert ok.status_code == 200
    assert web_sessions.sign_in_with_password(api.ctx.db, "alice", "second password", clock=SystemClock())


def test_a_changed_password_signs_the_users_browsers_out_but_not_others(api: Api) -> None:
    alice, admin = sessions_of(api, "alice"), sessions_of(api, "admin")
    assert api.user.put("/api/v1/users/alice/password", json={"password": "a new password"}).status_code == 200
    assert not live(api, alice.cookie) and live(api, admin.cookie)


def test_an_admin_resets_and_clears_anyones_password_without_the_current_one(api: Api) -> None:
    api.user.put("/api/v1/users/alice/password", json={"password": "alice's own"})
    reset = api.admin.put("/api/v1/users/alice/password", json={"password": "reset by admin"})
    assert reset.status_code == 200 and reset.json()["name"] == "alice"
    browser = sessions_of(api, "alice")
    cleared = api.admin.delete("/api/v1/users/alice/password")
    assert cleared.status_code == 200 and cleared.json()["hasPassword"] is False
    assert not live(api, browser.cookie)
    listed = {u["name"]: u["hasPassword"] for u in api.admin.get("/api/v1/users").json()}
    assert listed == {"admin": False, "alice": False}


@pytest.mark.parametrize("method", ["put", "delete"])
def test_a_user_may_not_touch_another_users_password(api: Api, method: str) -> None:
    kwargs = {"json": {"password": "takeover pw"}} if method == "put" else {}
    answer = getattr(api.user, method)("/api/v1/users/admin/password", **kwargs)
    assert answer.status_code == 403


def test_bad_passwords_and_names_are_refused_with_where(api: Api) -> None:
    short = api.user.put("/api/v1/users/alice/password", json={"password": "short"})
    assert short.status_code == 422 and short.json()["errors"][0]["path"] == "password"
    extra = api.user.put("/api/v1/users/alice/password", json={"password": "long enough", "admin": True})
    assert extra.status_code == 422 and "admin" in extra.text
    missing = api.admin.put("/api/v1/users/nobody/password", json={"password": "long enough"})
    assert missing.status_code == 404
    assert api.admin.delete("/api/v1/users/nobody/password").status_code == 404


@pytest.mark.real_password_cost
def test_passwords_are_hashed_at_the_real_cost(api: Api) -> None:
    # Elsewhere in process the tests hash at a cheaper N (tests/conftest.py); here, what a
    # server stores: scrypt, N=2**15, r=8, p=1, a 16-byte salt.
    assert api.user.put("/api/v1/users/alice/password", json={"password": "first password"}).status_code == 200
    with api.ctx.db.session() as session:
        stored = get_user(session, "alice").password_hash
    scheme, n, r, p, salt, _ = stored.split("$")
    assert (scheme, n, r, p, len(base64.b64decode(salt))) == ("scrypt", "32768", "8", "1", 16)
    assert web_sessions.sign_in_with_password(api.ctx.db, "alice", "first password", clock=SystemClock())
