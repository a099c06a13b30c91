"""A submit whose answer is lost makes one job: the SDK sends each submit (and clone) with an
``Idempotency-Key`` of its own and, when the connection drops after the request went out, sends
it again with the same key; the server answers the retry with the job the first one made."""

from __future__ import annotations

import httpx
import pytest
from api.harness import Api
from sqlalchemy import select

from trainyard.client import Client, ServerError, ServerUnreachable
from trainyard.store.rows import JobRow

JOB = "name: j\ntaskRoles:\n  m:\n    commands: ['true']\n"


class LosesAnswers(httpx.BaseTransport):
    """The app's transport, but the first ``lose`` answers to POSTs are lost on the way back:
    the server did the work, the client sees its connection drop (or, with ``status``, a
    gateway's error in place of the answer)."""

    def __init__(self, inner: httpx.BaseTransport, lose: int = 1, status: int | None = None) -> None:
        self.inner, self.lose, self.status = inner, lose, status
        self.keys: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.method != "POST":
            return response
        self.keys.append(request.headers.get("Idempotency-Key"))
        if self.lose <= 0:
            return response
        self.lose -= 1
        response.read()
        response.close()
        if self.status is not None:
            return httpx.Response(self.status, json={"detail": "bad gateway", "errors": []}, request=request)
        raise httpx.ReadError("the connection was lost before the answer came", request=request)


def losing(api: Api, **options: int) -> tuple[Client, LosesAnswers]:
    sdk = api.sdk(api.user_token)
    transport = LosesAnswers(sdk._http._transport, **options)
    sdk._http._transport = transport
    return sdk, transport


def owned_job_ids(api: Api) -> list[int]:
    with api.ctx.db.session() as session:
        return list(session.scalars(select(JobRow.id).order_by(JobRow.id)))


def test_a_submit_whose_answer_was_lost_is_sent_again_and_makes_one_job(api: Api) -> None:
    sdk, transport = losing(api)
    job = sdk.submit(JOB, retry_for=5)
    assert owned_job_ids(api) == [job.id]
    assert len(transport.keys) == 2 and transport.keys[0] == transport.keys[1] and transport.keys[0]


def test_a_gateways_502_in_place_of_the_answer_is_retried_too(api: Api) -> None:
    sdk, transport = losing(api, lose=2, status=502)
    job = sdk.submit(JOB, retry_for=5)
    assert owned_job_ids(api) == [job.id] and len(set(transport.keys)) == 1 and len(transport.keys) == 3


def test_each_submit_call_is_its_own_job_with_its_own_key(api: Api) -> None:
    sdk, transport = losing(api, lose=0)
    first, second = sdk.submit(JOB), sdk.submit(JOB)
    assert first.id != second.id and owned_job_ids(api) == [first.id, second.id]
    assert len(set(transport.keys)) == 2


def test_a_key_of_the_callers_own_makes_the_job_once_across_calls(api: Api) -> None:
    sdk = api.sdk(api.user_token)
    first = sdk.submit(JOB, idempotency_key="nightly-2026-01-01")
    assert sdk.submit(JOB, idempotency_key="nightly-2026-01-01") == first
    assert owned_job_ids(api) == [first.id]


def test_a_lost_clone_answer_makes_one_clone(api: Api) -> None:
    original = api.sdk(api.user_token).submit(JOB).id
    sdk, transport = losing(api)
    seen: list[float] = []
    clone = sdk.clone(original, name="again", retry_for=5, on_retry=lambda error, pause: seen.append(pause))
    assert owned_job_ids(api) == [original, clone.id] and seen == [0.5]


def test_without_retries_the_lost_answer_is_an_unreachable_error_and_a_500_is_not_retried(api: Api) -> None:
    sdk, _ = losing(api)
    with pytest.raises(ServerUnreachable):
        sdk.submit(JOB, retry_for=0)
    sdk, transport = losing(api, status=500)
    with pytest.raises(ServerError):
        sdk.submit(JOB, retry_for=5)
    assert len(transport.keys) == 1
