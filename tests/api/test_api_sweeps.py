"""``/api/v1/sweeps``: one submit makes a job per point of a grid or list (all or none, at
most once per Idempotency-Key), each with its point as parameters and the sweep's
variables; the group is listed, shown, stopped and cloned as one, by its owner or an admin."""

from __future__ import annotations

import json

import pytest
from api.harness import Api
from sqlalchemy import func, select

from trainyard.spec.sweeps import MAX_SWEEP_JOBS
from trainyard.store.rows import JobRow, SweepRow

pytestmark = pytest.mark.postgres

SWEEP = """\
name: lr
parameters: {lr: 1.0, epochs: 3}
taskRoles:
  m:
    commands: ['echo lr=<% $parameters.lr %> batch=<% $parameters.batch %> epochs=<% $parameters.epochs %>']
sweep:
  grid: {lr: [0.1, 0.01], batch: [32, 64]}
  parallel: 2
  metric: {pattern: "loss=([0-9.]+)"}
"""
YAML = {"content-type": "application/yaml"}


def post(client, body: str = SWEEP, url: str = "/api/v1/sweeps", **headers: str):
    return client.post(url, content=body, headers={**YAML, **headers})


def count(api: Api, row: type) -> int:
    with api.ctx.db.session() as session:
        return int(session.scalar(select(func.count()).select_from(row)) or 0)


def test_a_grid_makes_one_job_per_point_each_with_its_parameters_and_variables(api: Api) -> None:
    made = post(api.user)
    assert made.status_code == 201, made.text
    sweep = made.json()
    assert sweep["size"] == 4 and sweep["parallel"] == 2 and sweep["user"] == "alice"
    assert [m["params"] for m in sweep["members"]] == [
        {"lr": 0.1, "batch": 32}, {"lr": 0.1, "batch": 64}, {"lr": 0.01, "batch": 32}, {"lr": 0.01, "batch": 64}]
    third = api.user.get(f"/api/v1/jobs/{sweep['members'][2]['jobId']}").json()
    assert third["name"] == "lr-2"
    with api.ctx.db.session() as session:
        job = session.get(JobRow, sweep["members"][2]["jobId"])
        assert job is not None
        role = job.spec["taskRoles"]["m"]
        assert job.spec["parameters"] == {"lr": 0.01, "epochs": 3, "batch": 32}
        assert role["env"]["TRAINYARD_SWEEP_ID"] == str(sweep["id"]) and role["env"]["TRAINYARD_SWEEP_INDEX"] == "2"
        assert json.loads(role["env"]["TRAINYARD_SWEEP_PARAMS"]) == {"lr": 0.01, "batch": 32}
    shown = api.user.get(f"/api/v1/sweeps/{sweep['id']}").json()
    assert shown["states"] == {"WAITING": 4} and [m["metric"] for m in shown["members"]] == [None] * 4
    assert [s["id"] for s in api.user.get("/api/v1/sweeps").json()["items"]] == [sweep["id"]]


def test_a_list_sweep_and_its_problems_at_the_field(api: Api) -> None:
    body = SWEEP.replace("grid: {lr: [0.1, 0.01], batch: [32, 64]}", "list: [{lr: 0.5, batch: 8}]")
    assert [m["params"] for m in post(api.user, body).json()["members"]] == [{"lr": 0.5, "batch": 8}]
    for wrong, path in ((SWEEP.replace("parallel: 2", "parallel: 0"), "sweep.parallel"),
                        (SWEEP.replace("grid:", "grit:"), "sweep.grit"),
                        (SWEEP.replace('pattern: "loss=([0-9.]+)"', 'pattern: "("'), "sweep.metric.pattern"),
                        (SWEEP.replace("batch: [32, 64]", "batch: []"), "sweep.grid.batch"),
                        # a member whose placeholder has no value: refused, naming the member
                        (SWEEP.replace("grid: {lr: [0.1, 0.01], batch: [32, 64]}", "list: [{lr: 0.5}]"),
                         "taskRoles.m.commands[0]")):
        refused = post(api.user, wrong)
        assert refused.status_code == 422, refused.text
        assert path in [e["path"] for e in refused.json()["errors"]], refused.text
    refused = post(api.user, "name: j\ntaskRoles:\n  m:\n    commands: ['true']\n")
    assert refused.status_code == 422 and refused.json()["errors"][0]["path"] == "sweep"
    assert count(api, SweepRow) == 1 and count(api, JobRow) == 1


def test_too_many_jobs_are_refused_and_nothing_is_made(api: Api) -> None:
    big = SWEEP.replace("grid: {lr: [0.1, 0.01], batch: [32, 64]}",
                        f"grid: {{lr: {list(range(MAX_SWEEP_JOBS // 2 + 1))}, batch: [1, 2]}}")
    refused = post(api.user, big)
    assert refused.status_code == 422 and "split it" in refused.text
    # Over the user's waiting-job limit part way through: the whole sweep is refused.
    api.ctx.submit_limits = type(api.ctx.submit_limits)(max_waiting_jobs=3)
    over = post(api.user)
    assert over.status_code == 429, over.text
    assert "the sweep's job 3" in over.text
    assert count(api, JobRow) == 0 and count(api, SweepRow) == 0


def test_an_idempotency_key_makes_the_sweep_once(api: Api) -> None:
    first = post(api.user, **{"Idempotency-Key": "k1"})
    again = post(api.user, **{"Idempotency-Key": "k1"})
    assert again.status_code == 201 and again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    assert count(api, JobRow) == 4 and count(api, SweepRow) == 1


def test_others_sweeps_are_not_found_stop_and_clone_act_on_the_whole_sweep(api: Api) -> None:
    sweep = post(api.admin).json()
    assert api.user.get(f"/api/v1/sweeps/{sweep['id']}").status_code == 404
    assert api.user.post(f"/api/v1/sweeps/{sweep['id']}/stop").status_code == 404
    assert api.user.post(f"/api/v1/sweeps/{sweep['id']}/clone").status_code == 404
    assert api.user.get("/api/v1/sweeps").json()["items"] == []
    mine = post(api.user).json()
    assert {s["user"] for s in api.admin.get("/api/v1/sweeps").json()["items"]} == {"admin", "alice"}
    assert [s["id"] for s in api.admin.get("/api/v1/sweeps?user=alice").json()["items"]] == [mine["id"]]
    stopped = api.user.post(f"/api/v1/sweeps/{mine['id']}/stop")
    assert stopped.status_code == 200 and sorted(stopped.json()["stopped"]) == [m["jobId"] for m in mine["members"]]
    shown = api.user.get(f"/api/v1/sweeps/{mine['id']}").json()
    assert shown["ended"] and shown["states"] == {"STOPPED": 4}
    again = api.user.post(f"/api/v1/sweeps/{mine['id']}/stop").json()
    assert again["stopped"] == [] and len(again["refused"]) == 4
    clone = api.user.post(f"/api/v1/sweeps/{mine['id']}/clone")
    assert clone.status_code == 201 and clone.json()["id"] != mine["id"] and clone.json()["states"] == {"WAITING": 4}


def test_a_sweep_sent_as_one_job_is_refused_at_its_field_saying_where_it_goes(api: Api) -> None:
    refused = post(api.user, url="/api/v1/jobs")
    assert refused.status_code == 422
    [error] = refused.json()["errors"]
    assert error["path"] == "sweep" and "/api/v1/sweeps" in error["message"]
    assert count(api, JobRow) == 0
