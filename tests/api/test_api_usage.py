"""``GET /usage`` over HTTP and through the SDK: the report's figures, who sees what, and
bad input answered 422 or 404 naming the field."""

from __future__ import annotations

import pytest
from api.harness import Api
from services.usage_world import Run, add_job, add_sample, at

from trainyard.client import AuthError, TrainyardError
from trainyard.store.rows import UserRow

# The store answers these: they run on PostgreSQL too (tests/conftest.py).
pytestmark = pytest.mark.postgres

PERIOD = {"since": at(2).isoformat(), "until": at(6).isoformat()}


@pytest.fixture
def jobs(api: Api) -> dict[str, int]:
    """alice's job holds 2 GPUs from 0 h to 10 h at 50 %; the admin's holds 1 from 3 h to 4 h."""
    with api.ctx.db.session() as s:
        users = {u.name: u for u in s.query(UserRow)}
        mine = add_job(s, users["alice"], [[Run(at(0), at(10), gpus=[[0, 1000], [1, 1000]], cpu_milli=2000)]])
        add_sample(s, mine, at(2), step=4 * 3600, gpus_held=2, gpu_util_pct=50.0, cpu_cores=1.0)
        theirs = add_job(s, users["admin"], [[Run(at(3), at(4))]], name="admins")
    return {"alice": mine, "admin": theirs}


def test_an_admin_sees_everyones_usage_and_a_user_their_own(api: Api, jobs: dict[str, int]) -> None:
    everyone = api.sdk(api.admin_token).usage(since=at(2), until=at(6))
    assert [(line.name, line.jobs, line.gpuHours) for line in everyone.lines] == [("alice", 1, 8.0), ("admin", 1, 1.0)]
    assert everyone.lines[0].gpuEfficiency == pytest.approx(0.5) and everyone.lines[0].cpuEfficiency == 0.5
    assert everyone.lines[1].gpuEfficiency is None  # nothing measured
    assert (everyone.since, everyone.until, everyone.total.gpuHours) == (at(2), at(6), 9.0)

    alice = api.sdk(api.user_token)
    own = alice.usage(by="job", since=at(2), until=at(6))
    assert [(line.name, line.user, line.gpuHours) for line in own.lines] == [(str(jobs["alice"]), "alice", 8.0)]
    with pytest.raises(AuthError) as refused:
        alice.usage(user="admin", since=at(2), until=at(6))
    assert refused.value.status == 403 and "only an admin" in refused.value.message
    one_job = api.sdk(api.admin_token).usage(by="job", job=jobs["admin"], since=at(2), until=at(6))
    assert [line.jobName for line in one_job.lines] == ["admins"]


@pytest.mark.parametrize("params", [{"since": "0001-01-01T00:00:00Z", "until": "0001-01-01T01:00:00Z"},
                                    {"until": "0001-01-02T00:00:00Z"}, {"until": "9999-12-31T23:59:59Z"}])
def test_the_first_and_last_moments_there_are_make_a_period(api: Api, params: dict[str, str]) -> None:
    response = api.admin.get("/api/v1/usage", params=params)
    assert response.status_code == 200, response.text


def test_a_time_without_a_zone_is_utc(api: Api, jobs: dict[str, int]) -> None:
    response = api.admin.get("/api/v1/usage", params={"since": "2026-11-01T02:00:00", "until": "2026-11-01T06:00"})
    assert response.status_code == 200, response.text
    assert response.json()["total"]["gpuHours"] == 9.0 and response.json()["since"].startswith("2026-11-01T02:00:00")


@pytest.mark.parametrize(
    ("params", "status", "path"),
    [
        ({"by": "node"}, 422, "by"),
        ({"since": "yesterday"}, 422, "since"),
        ({"until": "2026-13-01T00:00"}, 422, "until"),
        ({"since": at(6).isoformat(), "until": at(2).isoformat()}, 422, "since"),
        ({"job": "0"}, 422, "job"),
        ({"job": str(2**31)}, 422, "job"),
        ({"user": "x" * 65}, 422, "user"),
        ({"group": "c\x00v"}, 422, "group"),  # PostgreSQL cannot hold a NUL: refused at the door
        ({"vc": "\x00"}, 422, "vc"),
        ({"user": "nobody"}, 404, "user"),
        ({"group": "nogroup"}, 404, "group"),
    ],
)
def test_bad_input_is_a_4xx_naming_the_field(api: Api, params: dict[str, str], status: int, path: str) -> None:
    response = api.admin.get("/api/v1/usage", params=params)
    assert response.status_code == status, response.text
    assert [e["path"] for e in response.json()["errors"]] == [path]


def test_usage_needs_a_token(api: Api) -> None:
    assert api.client().get("/api/v1/usage").status_code == 401
    with pytest.raises(TrainyardError):
        api.sdk(None).usage()
