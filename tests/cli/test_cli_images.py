"""`yard image list` and `yard image pull`: the image cache through the API, on a local
backend whose Podman holds the test image (scripts/dev-image.sh)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest
from api.harness import Api, make_api
from podman_support import needs_podman

from trainyard.backends.containers import ContainerEngine

pytestmark = needs_podman


@pytest.fixture
def api(db, tmp_path) -> Iterator[Api]:
    yield make_api(db, tmp_path / "local", containers=ContainerEngine.find("podman", "runc"))


def test_image_list_shows_which_node_holds_the_image(yard, api, image):
    code, out, _ = yard("image", "list")

    assert code == 0
    assert out.splitlines()[0].split() == ["NODE", "IMAGE", "ID", "SIZE", "CREATED", "PULLED", "AT"]
    node = api.ctx.backend.inventory()[0].name
    assert any(line.split()[:2] == [node, image] for line in out.splitlines()[1:]), out
    code, out, _ = yard("image", "list", "--json")
    row = next(r for r in json.loads(out) if r["image"] == image)
    assert row["node"] == node and row["sizeBytes"] > 10_000_000 and len(row["id"]) == 12


def test_an_admin_pull_of_an_image_already_there_says_so(yard, api, image):
    code, out, _ = yard("image", "pull", image, token=api.admin_token)

    assert code == 0
    assert out.strip() == f"{image} already on node {api.ctx.backend.inventory()[0].name}"


def test_a_pull_that_fails_says_why_and_exits_1(yard, api):
    code, out, _ = yard("image", "pull", "localhost/trainyard-no-such-image:1", token=api.admin_token)

    assert code == 1
    assert out.startswith("could not pull localhost/trainyard-no-such-image:1 on node ")


def test_only_an_admin_pulls_and_bad_input_is_refused_at_its_field(api, image):
    assert api.user.post("/api/v1/images/pull", json={"image": image}).status_code == 403
    response = api.admin.post("/api/v1/images/pull", json={"image": "--privileged"})
    assert response.status_code == 422
    assert [e["path"] for e in response.json()["errors"]] == ["image"]
    response = api.admin.post("/api/v1/images/pull", json={"image": image, "node": "nowhere"})
    assert response.status_code == 422
    assert response.json()["errors"][0]["path"] == "node"


def test_an_admin_evicts_an_image_from_the_node_and_bad_input_is_refused(yard, api, tmp_path):
    from uuid import uuid4

    from podman_support import tiny_image

    image = tiny_image(tmp_path, f"trainyard-evict-{uuid4().hex[:8]}")
    node = api.ctx.backend.inventory()[0].name
    assert api.user.post("/api/v1/images/remove", json={"image": image}).status_code == 403
    for body, path in (({"image": "--force"}, "image"), ({"image": image, "node": "nowhere"}, "node")):
        response = api.admin.post("/api/v1/images/remove", json=body)
        assert response.status_code == 422 and response.json()["errors"][0]["path"] == path

    code, out, _ = yard("image", "evict", image, token=api.admin_token)
    assert (code, out.strip()) == (0, f"removed {image} from node {node}")
    code, out, _ = yard("image", "evict", image, "--node", node, "--json", token=api.admin_token)
    assert code == 0
    assert json.loads(out) == [{"node": node, "image": image, "removed": False, "inUse": False, "error": "",
                                "message": f"{image} not on node {node}"}]


def test_an_image_a_live_jobs_task_runs_in_is_not_evicted(api, tmp_path):
    from uuid import uuid4

    from podman_support import tiny_image

    from trainyard.controller.loop import Controller
    from trainyard.services import jobs as job_service
    from trainyard.spec.loading import parse_job
    from trainyard.store.rows import UserRow

    image = tiny_image(tmp_path, f"trainyard-inuse-{uuid4().hex[:8]}")
    try:
        with api.ctx.db.session() as s:
            alice = s.query(UserRow).filter_by(name="alice").one()
            job = job_service.submit_job(s, alice, parse_job(
                f"name: boxed\nimage: {image}\ntaskRoles:\n  main:\n    commands: [sleep 60]\n"), clock=api.ctx.clock)
            job_id = job.id
        Controller(api.ctx.db, api.ctx.backend, api.ctx.clock).run_once()  # placed and launched
        response = api.admin.post("/api/v1/images/remove", json={"image": image})
        assert response.status_code == 409
        assert f"job {job_id} task main/0 on node " in response.text
    finally:
        subprocess.run(["podman", "rm", "--force", "--all", "--filter", f"ancestor={image}"], capture_output=True)
        subprocess.run(["podman", "rmi", "--force", image], capture_output=True)
