"""``PUT /vcs/{name}/borrowing`` (admin only; a field left out stays, null is no limit, a bad
value is a 422 naming its field) and what ``GET /metrics`` shows of borrowing: the borrowed
share, each VC's weight and, where it has one, its borrow limit."""

from __future__ import annotations

from api.harness import Api
from services.usage_world import T0, Run, add_job
from sqlalchemy import select

from trainyard.services.auth import get_user
from trainyard.store.rows import AttemptRow, NodeRow, TaskRow

BORROWING = "/api/v1/vcs/vision/borrowing"


def test_an_admin_sets_limits_and_weight_field_by_field_and_others_are_refused(api: Api) -> None:
    assert api.admin.post("/api/v1/vcs", json={"name": "vision", "gpus": 2, "lendLimit": 1}).status_code == 201
    answer = api.admin.put(BORROWING, json={"borrowLimit": 3, "weight": 2.5})
    assert answer.status_code == 200, answer.text
    vc = answer.json()
    assert (vc["name"], vc["borrowLimit"], vc["lendLimit"], vc["weight"]) == ("vision", 3, 1, 2.5)
    vc = api.admin.put(BORROWING, json={"lendLimit": None}).json()  # null: no limit; the rest stays
    assert (vc["borrowLimit"], vc["lendLimit"], vc["weight"]) == (3, None, 2.5)
    default = api.admin.put("/api/v1/vcs/default/borrowing", json={"borrowLimit": 0, "weight": 3}).json()
    assert (default["name"], default["borrowLimit"], default["weight"]) == ("default", 0, 3.0)
    listed = {v["name"]: v for v in api.user.get("/api/v1/vcs").json()}
    assert listed["default"]["borrowLimit"] == 0 and listed["default"]["weight"] == 3.0

    for body, path in (({"borrowLimit": -1}, "borrowLimit"), ({"lendLimit": 1.5}, "lendLimit"),
                       ({"weight": 0}, "weight"), ({"weight": None}, "weight"), ({"weight": 1001}, "weight"),
                       ({"borrowLimit": "4"}, "borrowLimit"), ({"limit": 4}, "limit")):
        refused = api.admin.put(BORROWING, json=body)
        assert refused.status_code == 422 and refused.json()["errors"][0]["path"] == path, (body, refused.text)
    assert api.admin.put("/api/v1/vcs/nope/borrowing", json={"weight": 2}).status_code == 404
    assert api.user.put(BORROWING, json={"weight": 9}).status_code == 403
    assert api.client().put(BORROWING, json={"weight": 9}).status_code == 401
    vc = next(v for v in api.admin.get("/api/v1/vcs").json() if v["name"] == "vision")
    assert (vc["borrowLimit"], vc["lendLimit"], vc["weight"]) == (3, None, 2.5)

    sdk = api.sdk(api.admin_token)
    vc_view = sdk.set_vc_borrowing("vision", borrow_limit=None, weight=1)
    assert (vc_view.borrowLimit, vc_view.lendLimit, vc_view.weight) == (None, None, 1.0)
    assert sdk.create_vc("speech", gpus=1, borrow_limit=2).borrowLimit == 2


def test_metrics_show_the_borrowed_share_the_weight_and_only_set_limits(api: Api) -> None:
    api.admin.post("/api/v1/vcs", json={"name": "vision", "gpus": 1, "borrowLimit": 2, "weight": 4})
    with api.ctx.db.session() as session:
        node = session.scalars(select(NodeRow)).one().name
        alice = get_user(session, "alice")
        for gpus, borrowed in (([0], False), ([1, 2], True)):
            job = add_job(session, alice, [[Run(T0, None, gpus=[[i, 1000] for i in gpus])]], vc="vision")
            session.scalars(select(AttemptRow).where(AttemptRow.job_id == job)).one().borrowed = borrowed
            for task in session.scalars(select(TaskRow).where(TaskRow.job_id == job)):
                task.node = node
    page = api.admin.get("/metrics")
    assert page.status_code == 200
    lines = set(page.text.splitlines())
    assert {
        'trainyard_vc_used_gpus{vc="vision"} 1.0', 'trainyard_vc_borrowed_gpus{vc="vision"} 2.0',
        'trainyard_vc_borrow_limit_gpus{vc="vision"} 2.0', 'trainyard_vc_weight{vc="vision"} 4.0',
        'trainyard_vc_weight{vc="default"} 1.0',
    } <= lines
    assert not any(line.startswith('trainyard_vc_borrow_limit_gpus{vc="default"}') for line in lines)
    assert any(line.startswith("# HELP trainyard_vc_borrowed_gpus GPUs the VC's guaranteed jobs hold beyond its quota")
               for line in lines)
    assert 'trainyard_vc_opportunistic_gpus{vc="vision"} 0.0' in lines
