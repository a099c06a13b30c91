"""``POST /jobs`` and ``POST /jobs/{id}/clone`` take an ``Idempotency-Key`` (the IETF HTTP
draft's header): a retried submit gets the first answer again, never a second job; the key
with another request is 422; keys are per user, kept ``idempotency_key_hours``, and two
requests with one key at the same moment make one job (a unique constraint)."""

from __future__ import annotations

import threading
import uuid

import pytest
from api.harness import Api, make_api
from sqlalchemy import func, select

from trainyard.core.clock import FakeClock
from trainyard.store.rows import JobRow

# The store answers these: they run on PostgreSQL too (tests/conftest.py).
pytestmark = pytest.mark.postgres

JOB = "name: j\ntaskRoles:\n  m:\n    commands: ['true']\n"
YAML = {"content-type": "application/yaml"}


def post(client, body: str = JOB, key: str | None = None, url: str = "/api/v1/jobs", **headers: str):
    sent = {**YAML, **headers, **({"Idempotency-Key": key} if key is not None else {})}
    return client.post(url, content=body, headers=sent)


def job_count(api: Api) -> int:
    with api.ctx.db.session() as session:
        return int(session.scalar(select(func.count()).select_from(JobRow)) or 0)


def test_two_submits_with_one_key_make_one_job_and_the_second_answer_is_the_first(api: Api) -> None:
    key = str(uuid.uuid4())
    first = post(api.user, key=key)
    assert first.status_code == 201, first.text
    again = post(api.user, key=key)
    assert again.status_code == 201 and again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first.headers
    assert job_count(api) == 1
    # The draft writes the key as a Structured Field string: quoted, it is the same key.
    assert post(api.user, key=f'"{key}"').json()["id"] == first.json()["id"]
    # Without a key, each submit is a job, as before.
    assert post(api.user).json()["id"] != post(api.user).json()["id"]
    assert job_count(api) == 3


def test_the_key_with_another_request_is_422_naming_the_header_and_the_job_it_made(api: Api) -> None:
    key = str(uuid.uuid4())
    made = post(api.user, key=key).json()["id"]
    for other in (post(api.user, JOB.replace("name: j", "name: k"), key=key),  # another body
                  post(api.user, JOB, key=key, **{"content-type": "application/json"}),  # another media type
                  post(api.user, "", key=key, url=f"/api/v1/jobs/{made}/clone")):  # another operation
        assert other.status_code == 422, other.text
        [error] = other.json()["errors"]
        assert error["path"] == "Idempotency-Key" and f"job {made}" in error["message"]
    assert job_count(api) == 1


def test_keys_are_per_user(api: Api) -> None:
    key = "one-key"
    alices = post(api.user, key=key).json()
    admins = post(api.admin, key=key).json()
    assert admins["id"] != alices["id"] and admins["user"] == "admin" and alices["user"] == "alice"
    assert post(api.user, key=key).json() == alices  # and alice's is still hers


def test_a_refused_submit_keeps_nothing_and_a_dry_run_ignores_the_key(api: Api) -> None:
    key = str(uuid.uuid4())
    refused = post(api.user, JOB + "priority: high\n", key=key)
    assert refused.status_code == 422 and [e["path"] for e in refused.json()["errors"]] == ["priority"]
    dry = post(api.user, key=key, url="/api/v1/jobs?dryRun=true")
    assert dry.status_code == 200 and job_count(api) == 0
    fixed = post(api.user, key=key)  # the same key, now with a job file that is accepted
    assert fixed.status_code == 201 and job_count(api) == 1


def test_a_malformed_key_is_422_at_the_header(api: Api) -> None:
    for bad in ("", "   ", "x" * 256, 'a"b', "a\\b", "caf\u00e9"):
        response = api.user.post("/api/v1/jobs", content=JOB, headers=[*YAML.items(),
                                                                       ("Idempotency-Key", bad.encode())])
        assert response.status_code == 422, (bad, response.text)
        assert [e["path"] for e in response.json()["errors"]] == ["Idempotency-Key"]
    assert job_count(api) == 0
    assert post(api.user, key="x" * 255).status_code == 201


def test_a_retried_clone_makes_one_clone(api: Api) -> None:
    original = post(api.user).json()["id"]
    url = f"/api/v1/jobs/{original}/clone?name=again"
    first = api.user.post(url, headers={"Idempotency-Key": "clone-1"})
    assert first.status_code == 201, first.text
    again = api.user.post(url, headers={"Idempotency-Key": "clone-1"})
    assert again.json() == first.json() and again.headers["Idempotent-Replayed"] == "true"
    other = api.user.post(f"/api/v1/jobs/{original}/clone?name=other", headers={"Idempotency-Key": "clone-1"})
    assert other.status_code == 422  # another clone parameter: another request
    assert job_count(api) == 2


def test_concurrent_submits_with_one_key_make_one_job(api: Api) -> None:
    key = str(uuid.uuid4())
    answers: list = []
    start = threading.Barrier(6)

    def submit() -> None:
        client = api.user
        start.wait()
        answers.append(post(client, key=key))

    threads = [threading.Thread(target=submit) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [a.status_code for a in answers] == [201] * 6, [a.text for a in answers]
    assert len({a.json()["id"] for a in answers}) == 1
    assert job_count(api) == 1


def test_a_key_is_kept_for_idempotency_key_hours_then_may_make_a_new_job(db, tmp_path) -> None:
    from trainyard.store.rows import IdempotencyKeyRow  # imported here: the other tests run on any version

    clock = FakeClock()
    api = make_api(db, tmp_path / "local", clock=clock)
    api.ctx.idempotency_key_hours = 2.0
    first = post(api.user, key="k").json()["id"]
    clock.advance(2 * 3600 - 1)
    assert post(api.user, key="k").json()["id"] == first
    clock.advance(1)
    later = post(api.user, key="k").json()["id"]
    assert later != first and job_count(api) == 2
    with api.ctx.db.session() as session:  # the old row went; the key names the new job now
        assert [r.job_id for r in session.scalars(select(IdempotencyKeyRow))] == [later]
    post(api.user, key="other")
    clock.advance(2 * 3600)
    post(api.user, key="third")  # a keyed submit removes every key past its time
    with api.ctx.db.session() as session:
        assert sorted(r.key for r in session.scalars(select(IdempotencyKeyRow))) == ["third"]
