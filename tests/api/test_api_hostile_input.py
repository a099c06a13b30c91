"""Hostile request bodies and methods get a 4xx in Trainyard's error format, never a 500."""

from __future__ import annotations

import asyncio
import logging

import pytest
from api.harness import Api

from trainyard.web.bodies import MAX_JSON_BODY_BYTES

JSON = {"content-type": "application/json"}


def assert_error(response, status: int, path: str | None = None) -> dict:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"detail", "errors"} and isinstance(body["detail"], str)
    if path is not None:
        assert [e["path"] for e in body["errors"]] == [path], body
    return body


def test_a_boolean_is_not_a_number_of_gpus(api: Api) -> None:
    assert api.admin.post("/api/v1/vcs", json={"name": "vision", "gpus": 1}).status_code == 201
    body = assert_error(api.admin.put("/api/v1/vcs/vision/quota", json={"gpus": True}), 422, "gpus")
    assert "integer" in body["detail"]
    assert {v["name"]: v["quota"] for v in api.admin.get("/api/v1/vcs").json()}["vision"] == {"*": 1}


@pytest.mark.parametrize(("url", "method", "body", "path"), [
    ("/api/v1/vcs", "post", {"name": "v", "gpus": False}, "gpus"),
    ("/api/v1/vcs", "post", {"name": "v", "gpus": 1, "priorityPreemption": 0}, "priorityPreemption"),
    ("/api/v1/vcs", "post", {"name": 7, "gpus": 1}, "name"),
    ("/api/v1/vcs", "post", {"name": "v", "gpus": "1"}, "gpus"),
    ("/api/v1/quotas/alice", "put", {"priority": "prod", "gpus": True}, "gpus"),
    ("/api/v1/users", "post", {"name": "bob", "admin": 1}, "admin"),
    ("/api/v1/users", "post", {"name": "bob", "admin": "true"}, "admin"),
    ("/api/v1/tokens", "post", {"name": 5}, "name"),
])
def test_request_bodies_are_strictly_typed(api: Api, url: str, method: str, body: dict, path: str) -> None:
    assert_error(api.admin.request(method, url, json=body), 422, path)


def test_numbers_that_json_schema_calls_integers_are_accepted(api: Api) -> None:
    response = api.admin.put("/api/v1/quotas/alice", json={"priority": "prod", "gpus": 2})
    assert response.status_code == 200 and response.json()[0]["gpus"] == 2.0
    response = api.admin.post("/api/v1/vcs", json={"name": "vision", "gpus": 2.0})
    assert response.status_code == 201 and response.json()["quota"] == {"*": 2}
    assert_error(api.admin.put("/api/v1/vcs/vision/quota", json={"gpus": 1.5}), 422, "gpus")


@pytest.mark.parametrize(("url", "method", "template", "path"), [
    ("/api/v1/vcs/default/quota", "put", '{"gpus": %s}', "gpus"),
    ("/api/v1/quotas/alice", "put", '{"priority": "prod", "gpus": %s}', "gpus"),
    ("/api/v1/users", "post", '{"name": %s}', "name"),
    ("/api/v1/users", "post", '{"name": "bob", "extra": [%s]}', "extra"),
])
def test_an_integer_of_thousands_of_digits_is_refused_naming_its_field(
        api: Api, url: str, method: str, template: str, path: str) -> None:
    body = assert_error(api.admin.request(method, url, content=template % ("7" * 5000), headers=JSON), 422, path)
    assert "5000 digits" in body["detail"] or "Extra inputs" in body["detail"]


@pytest.mark.parametrize(("content", "path", "words"), [
    (b'{"name": "bob"', "<line 1, column 15>", "not valid JSON"),
    (b"[" * 50_000, "<body>", "too deeply"),
    (b'{"name": "\xff"}', "<body>", "UTF-8"),
], ids=["truncated", "nested-50000-deep", "not-utf-8"])
def test_an_unreadable_json_body_says_why_and_where(api: Api, content: bytes, path: str, words: str) -> None:
    body = assert_error(api.admin.post("/api/v1/users", content=content, headers=JSON), 422, path)
    assert words in body["detail"]


def test_an_oversized_json_body_is_refused_before_it_is_read_whole(api: Api) -> None:
    big = b'{"name": "' + b"x" * MAX_JSON_BODY_BYTES + b'"}'
    assert_error(api.admin.post("/api/v1/users", content=big, headers=JSON), 413)

    def chunks():  # no Content-Length: the limit holds while streaming
        yield big[:1000]
        yield big[1000:]
    assert_error(api.admin.post("/api/v1/users", content=chunks(), headers=JSON), 413)


@pytest.mark.parametrize(("method", "url"), [
    ("post", "/api/v1/vcs/a%00b/quota"),
    ("post", "/api/v1/nodes/a%00b/cordon"),
])
def test_nul_in_a_path_name_is_refused(api: Api, method: str, url: str) -> None:
    response = api.admin.put(url, json={"gpus": 1}) if "quota" in url else api.admin.post(url)
    assert_error(response, 422, "name")


def test_nul_in_a_body_name_is_refused(api: Api) -> None:
    assert_error(api.admin.post("/api/v1/tokens", json={"user": "a\x00b"}), 422, "user")
    assert_error(api.admin.post("/api/v1/groups", json={"name": "a\x00b"}), 422, "name")


@pytest.mark.parametrize(("method", "url", "body", "path"), [
    ("patch", "/api/v1/nodes/{node}/labels", '{"labels": {"k\\udc00": "v"}}', "labels.k\\udc00"),
    ("put", "/api/v1/alerts/rules/gpu-idle", '{"params": {"\\ud800": 1}}', "params.\\ud800"),
    ("post", "/api/v1/tokens", '{"name": "a\\ud800"}', "name"),
    ("post", "/api/v1/storages", '{"name": "s", "path": "/srv/\\udfff"}', "path"),
])
def test_a_lone_surrogate_anywhere_in_a_json_body_is_422_at_its_path(api: Api, method: str, url: str, body: str,
                                                                     path: str) -> None:
    # Every JSON body is read by one reader (web/bodies.py): a key as well as a value.
    node = api.admin.get("/api/v1/nodes").json()[0]["name"]
    response = api.admin.request(method.upper(), url.format(node=node), content=body, headers=JSON)
    body_ = assert_error(response, 422, path)
    assert "lone UTF-16 surrogate" in body_["detail"]


def test_405_names_every_method_the_path_serves(api: Api) -> None:
    response = api.user.delete("/api/v1/jobs")
    assert_error(response, 405)
    assert response.headers["allow"] == "GET, POST"
    assert api.user.post("/api/v1/me").headers["allow"] == "GET"


def _asgi_call(app, scope: dict, messages: list[dict]) -> list[dict]:
    sent: list[dict] = []

    async def receive() -> dict:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


@pytest.mark.parametrize("url", ["/api/v1/jobs", "/api/v1/users"])
def test_a_client_that_hangs_up_mid_body_is_a_warning_not_an_error(
        api: Api, caplog: pytest.LogCaptureFixture, url: str) -> None:
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": url, "raw_path": url.encode(), "root_path": "", "query_string": b"",
        "headers": [(b"authorization", f"Bearer {api.admin_token}".encode()),
                    (b"content-type", b"application/json"), (b"content-length", b"100")],
        "client": ("127.0.0.1", 1234), "server": ("testserver", 80), "state": {},
    }
    with caplog.at_level(logging.WARNING):
        sent = _asgi_call(api.app, scope, [{"type": "http.request", "body": b'{"name":', "more_body": True}])
    statuses = [m["status"] for m in sent if m["type"] == "http.response.start"]
    assert all(s < 500 for s in statuses), statuses
    records = [r for r in caplog.records if r.name.startswith("trainyard")]
    assert [(r.levelno, r.exc_info) for r in records] == [(logging.WARNING, None)]
    assert "disconnected" in records[0].getMessage()


def test_two_creates_of_the_same_name_at_once_answer_409_not_500(api: Api, monkeypatch) -> None:
    # The race cannot be timed from a test: insert as the loser of it does, having checked
    # the name before the winner's row existed.
    from trainyard.services import auth
    from trainyard.store.rows import UserRow

    assert api.admin.post("/api/v1/users", json={"name": "bob"}).status_code == 201

    def create_after_a_stale_check(session, name, *, is_admin, clock):
        session.add(UserRow(name=name, is_admin=is_admin, created_at=clock.now()))
        session.flush()

    monkeypatch.setattr(auth, "create_user", create_after_a_stale_check)
    assert_error(api.admin.post("/api/v1/users", json={"name": "bob"}), 409)


def test_a_request_that_finds_no_database_connection_free_answers_503_to_retry_not_500(api: Api, monkeypatch) -> None:
    # Every connection held for the pool's timeout (a burst of submits, bench_live_scale.py):
    # the request did nothing, and its client is told to send it again.
    from sqlalchemy.exc import TimeoutError as PoolTimeout

    from trainyard.services import auth

    def no_connection(*_args, **_kwargs):
        raise PoolTimeout("QueuePool limit of size 10 overflow 50 reached, connection timed out, timeout 30.00")

    monkeypatch.setattr(auth, "create_user", no_connection)
    answer = api.admin.post("/api/v1/users", json={"name": "carol"})
    assert_error(answer, 503)
    assert answer.headers["Retry-After"] == "1" and "try again" in answer.json()["detail"]


def test_the_database_pool_is_the_settings_and_an_in_memory_database_has_none(tmp_path) -> None:
    from trainyard.store.db import Database

    db = Database(f"sqlite:///{tmp_path / 'pool.db'}", pool_size=3, pool_overflow=4)
    assert (db.engine.pool.size(), db.engine.pool._max_overflow) == (3, 4)  # type: ignore[attr-defined]
    db.engine.dispose()
    Database("sqlite://").engine.dispose()  # one connection, no pool to size: no error
