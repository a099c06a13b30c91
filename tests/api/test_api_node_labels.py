"""Admins set node labels live (``PATCH /nodes/{name}/labels``): stored apart from the
backend's, merged over them, shown in the node view, seen by the scheduler's next snapshot
and by submit's checks; others are refused; bad keys and values are 422 at their path."""

from __future__ import annotations

from api.harness import Api

from trainyard.controller.inventory import sync_inventory
from trainyard.services.node_view import node_states
from trainyard.store.rows import NodeRow

JOB = ("name: j\ntaskRoles:\n  w:\n    commands: [hostname]\n    resourcePerInstance:\n      gpu: 1\n"
       "      selector: 'node.labels[\"ib\"] == \"true\"'\n")


def node_name(api: Api) -> str:
    return str(api.admin.get("/api/v1/nodes").json()[0]["name"])


def test_an_admin_sets_and_removes_labels_and_the_scheduler_sees_them(api: Api) -> None:
    name = node_name(api)
    response = api.admin.patch(f"/api/v1/nodes/{name}/labels", json={"labels": {"ib": "true", "rack": "r1"}})
    assert response.status_code == 200, response.text
    assert response.json()["labels"] == {"ib": "true", "rack": "r1"}
    with api.ctx.db.session() as session:
        assert node_states(session, in_use=True)[0].labels == {"ib": "true", "rack": "r1"}
    response = api.admin.patch(f"/api/v1/nodes/{name}/labels", json={"labels": {"rack": None}})
    assert response.json()["labels"] == {"ib": "true"} and response.json()["adminLabels"] == {"ib": "true"}
    assert api.user.get("/api/v1/nodes").json()[0]["labels"] == {"ib": "true"}


def test_labels_set_by_an_admin_outlive_an_inventory_sync_and_may_hide_a_reported_one(api: Api) -> None:
    name = node_name(api)
    backend = api.ctx.backend
    with api.ctx.db.session() as session:
        session.get_one(NodeRow, name).labels = {"zone": "a"}
    api.admin.patch(f"/api/v1/nodes/{name}/labels", json={"labels": {"ib": "true", "zone": None}})
    with api.ctx.db.session() as session:
        sync_inventory(session, backend.name, backend.inventory(), api.ctx.clock)
    view = api.admin.get("/api/v1/nodes").json()[0]
    assert view["labels"] == {"ib": "true"} and view["adminLabels"] == {"ib": "true", "zone": None}


def test_a_non_admin_is_refused_and_a_missing_node_is_404(api: Api) -> None:
    name = node_name(api)
    assert api.user.patch(f"/api/v1/nodes/{name}/labels", json={"labels": {"ib": "true"}}).status_code == 403
    assert api.admin.patch("/api/v1/nodes/nowhere/labels", json={"labels": {"ib": "true"}}).status_code == 404
    assert api.admin.get("/api/v1/nodes").json()[0]["labels"] == {}


def test_bad_keys_and_values_are_422_at_their_path(api: Api) -> None:
    name = node_name(api)
    for labels, path in (({"bad key": "x"}, "labels.bad key"), ({"ib": "not ok!"}, "labels.ib"),
                         ({"-ib": "x"}, "labels.-ib"), ({"ib": "x" * 64}, "labels.ib")):
        response = api.admin.patch(f"/api/v1/nodes/{name}/labels", json={"labels": labels})
        assert response.status_code == 422, response.text
        assert [e["path"] for e in response.json()["errors"]] == [path]
    response = api.admin.patch(f"/api/v1/nodes/{name}/labels", json={"labels": {"ib": 1}})
    assert response.status_code == 422 and response.json()["errors"][0]["path"].startswith("labels.ib")
    assert api.admin.patch(f"/api/v1/nodes/{name}/labels", json={"labels": {}}).status_code == 422


def test_a_lone_surrogate_in_a_label_key_or_value_is_422_at_its_path_not_500(api: Api) -> None:
    # JSON's \\ud800 is a lone UTF-16 surrogate, which no UTF-8 answer can hold: a key holding
    # one was quoted in the error's path, and answering the error itself failed (a 500).
    name = node_name(api)
    for body, path in (('{"labels": {"\\ud800": "x"}}', "labels.\\ud800"),
                       ('{"labels": {"rack\\udfff": null}}', "labels.rack\\udfff"),
                       ('{"labels": {"ib": "t\\ud83d"}}', "labels.ib")):
        response = api.admin.patch(f"/api/v1/nodes/{name}/labels", content=body,
                                   headers={"content-type": "application/json"})
        assert response.status_code == 422, response.text
        [error] = response.json()["errors"]
        assert error["path"] == path and "lone UTF-16 surrogate" in error["message"], error
    assert api.admin.get("/api/v1/nodes").json()[0]["adminLabels"] == {}


def test_a_job_whose_selector_reads_a_label_no_node_has_yet_is_accepted_and_waits(api: Api) -> None:
    response = api.user.post("/api/v1/jobs", content=JOB, headers={"content-type": "application/yaml"})
    assert response.status_code == 201, response.text


def test_a_selector_no_gpu_can_ever_meet_is_refused_at_submit_with_the_clause_and_the_best_value(api: Api) -> None:
    # the harness's GPUs have 16 GiB; a label may come later, a bigger GPU may not
    never = JOB.replace('node.labels["ib"] == "true"', 'node.labels["ib"] == "true" && gpu.memoryMB >= 40000')
    response = api.user.post("/api/v1/jobs", content=never, headers={"content-type": "application/yaml"})
    assert response.status_code == 422, response.text
    [error] = response.json()["errors"]
    assert error["path"] == "taskRoles.w.resourcePerInstance.selector"
    assert "no node meets gpu.memoryMB >= 40000: the largest GPU has 16384 MiB" in error["message"]


def test_an_invalid_selector_is_refused_at_submit_and_in_a_dry_run_with_its_path(api: Api) -> None:
    bad = JOB.replace('node.labels["ib"] == "true"', "gpu.memroyMB >= 40000")
    assert bad != JOB
    for url in ("/api/v1/jobs", "/api/v1/jobs?dryRun=true"):
        response = api.user.post(url, content=bad, headers={"content-type": "application/yaml"})
        assert response.status_code == 422, response.text
        [error] = response.json()["errors"]
        assert error["path"] == "taskRoles.w.resourcePerInstance.selector"
        assert "unknown attribute gpu.memroyMB" in error["message"] and "line 1, column 5" in error["message"]
