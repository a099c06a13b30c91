"""Whole-node roles over HTTP: accepted when the cluster has the nodes, refused with 4xx and
the field path when mixed with amounts or asking for more nodes than there are."""

from __future__ import annotations

from api.harness import Api

from trainyard.core.states import AttemptState, JobState, TaskState
from trainyard.store.rows import AttemptRow, JobRow, NodeRow, TaskRow


def submit(api: Api, role: str) -> tuple[int, dict]:
    text = f"name: j\ntaskRoles:\n  trainer:\n    commands: ['sleep 600']\n{role}"
    response = api.user.post("/api/v1/jobs", content=text, headers={"content-type": "application/yaml"})
    return response.status_code, response.json()


def test_a_whole_node_role_is_queued_and_keeps_its_form(api: Api) -> None:
    status, body = submit(api, "    nodes: 1\n")
    assert status == 201, body
    role = api.user.get(f"/api/v1/jobs/{body['id']}").json()["spec"]["taskRoles"]["trainer"]
    assert (role["nodes"], role["instances"]) == (1, 1)
    assert "gpu" not in role["resourcePerInstance"]


def test_mixing_nodes_with_instances_or_amounts_is_refused_at_the_fields(api: Api) -> None:
    status, body = submit(api, "    nodes: 1\n    instances: 2\n    resourcePerInstance: {gpu: 4}\n")
    assert status == 422, body
    assert [e["path"] for e in body["errors"]] == [
        "taskRoles.trainer.instances", "taskRoles.trainer.resourcePerInstance.gpu",
    ]
    assert "leave instances out" in body["detail"]


def test_more_whole_nodes_than_the_cluster_has_are_refused_with_the_numbers(api: Api) -> None:
    status, body = submit(api, "    nodes: 2\n")
    assert status == 422, body
    assert body["errors"] == [{"path": "taskRoles.trainer",
                               "message": "taskRoles.trainer: needs 2 whole nodes with GPUs; the cluster has 1"}]
    status, body = submit(api, "    nodes: 1\n    resourcePerInstance: {gpuModel: H100}\n")
    assert status == 422 and body["errors"][0]["path"] == "taskRoles.trainer", body
    assert "no node has only H100 GPUs" in body["detail"]


def test_a_whole_node_counts_its_gpus_against_the_vc_quota_at_submit(api: Api) -> None:
    admin = api.sdk(api.admin_token)
    admin.create_vc("small", gpus=2, borrow_limit=0)  # else it may borrow the rest
    admin.grant_vc("small", "alice")
    status, body = submit(api, "    nodes: 1\ndefaults: {virtualCluster: small}\n")
    assert status == 422, body
    assert body["detail"].startswith("the job needs 4 GPU but VC small guarantees 2")
    assert body["errors"][0]["path"] == "defaults.virtualCluster"


def test_the_job_list_counts_the_gpus_a_whole_node_role_was_given(api: Api) -> None:
    status, body = submit(api, "    nodes: 1\n")
    assert status == 201, body
    job_id = body["id"]
    listed = {j["id"]: j for j in api.user.get("/api/v1/jobs").json()["items"]}
    assert listed[job_id]["gpus"] == 0  # not placed yet: its node is not chosen
    with api.ctx.db.session() as s:  # what the controller writes when it places the job
        node = s.query(NodeRow).one()
        now = api.ctx.clock.now()
        attempt = AttemptRow(job_id=job_id, number=0, state=AttemptState.RUNNING, started_at=now)
        s.add(attempt)
        s.flush()
        s.add(TaskRow(attempt_id=attempt.id, job_id=job_id, role="trainer", index=0, state=TaskState.RUNNING,
                      node=node.name, gpus=[[i, 1000] for i in range(4)], cpu_milli=8000, memory_mb=16384,
                      ports={}, started_at=now))
        job = s.get(JobRow, job_id)
        assert job is not None
        job.state = JobState.RUNNING
    listed = {j["id"]: j for j in api.user.get("/api/v1/jobs").json()["items"]}
    assert listed[job_id]["gpus"] == 4
    with api.ctx.db.session() as s:  # preempted: it waits to be placed again, maybe on another node
        job = s.get(JobRow, job_id)
        assert job is not None
        job.state = JobState.WAITING
    listed = {j["id"]: j for j in api.user.get("/api/v1/jobs").json()["items"]}
    assert listed[job_id]["gpus"] == 0
