"""The SDK turns each way a request can fail into the error a caller can act on."""

from __future__ import annotations

import pytest
from api.harness import Api

from trainyard.client import AuthError, Client, ServerUnreachable, TrainyardError, WaitTimeout

JOB = "name: j\ntaskRoles:\n  m:\n    commands: ['true']\n"


def submitted(api: Api) -> int:
    """A job of alice's, submitted over plain HTTP (what the SDK returns is not under test here)."""
    response = api.user.post("/api/v1/jobs", content=JOB, headers={"content-type": "application/yaml"})
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def test_a_bad_token_is_an_auth_error_with_the_servers_status(api: Api) -> None:
    with pytest.raises(AuthError) as caught:
        api.sdk("not-a-token").me()
    assert caught.value.status == 401 and caught.value.message


def test_a_refused_job_file_is_a_trainyard_error_carrying_the_field_paths(api: Api) -> None:
    with pytest.raises(TrainyardError) as caught:
        api.sdk(api.user_token).submit(JOB + "priority: high\n")
    assert not isinstance(caught.value, AuthError)
    assert caught.value.status == 422
    assert [e["path"] for e in caught.value.errors] == ["priority"]


def test_an_unknown_job_is_a_not_found_trainyard_error(api: Api) -> None:
    with pytest.raises(TrainyardError) as caught:
        api.sdk(api.user_token).job(999)
    assert caught.value.status == 404 and not isinstance(caught.value, AuthError)


def test_a_plain_user_asking_for_an_admin_operation_is_an_auth_error(api: Api) -> None:
    with pytest.raises(AuthError) as caught:
        api.sdk(api.user_token).create_user("mallory")
    assert caught.value.status == 403


def test_waiting_on_a_job_that_cannot_end_times_out(api: Api) -> None:
    job_id = submitted(api)  # no controller runs in the harness: the job stays WAITING
    with pytest.raises(WaitTimeout, match=rf"job {job_id} is still WAITING after 0 s"):
        api.sdk(api.user_token).wait(job_id, timeout=0)


def test_no_server_is_server_unreachable_naming_the_url() -> None:
    with Client("http://127.0.0.1:9", None, timeout=2) as sdk, pytest.raises(ServerUnreachable) as caught:
        sdk.healthz()
    assert "http://127.0.0.1:9" in caught.value.message and "yard up" in caught.value.message
