"""An elastic job (``instances: {min, max}``) through the API and the portal: its views count
its minimum and never answer 500 (the attack review of issue 34 found every job list did)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

ELASTIC = ("name: el\ntaskRoles:\n  worker:\n    instances: {min: 1, max: 3}\n    resourcePerInstance: {gpu: 1}\n"
           "    commands: ['sleep 600']\n")


def test_an_elastic_jobs_views_count_its_minimum_and_name_every_worker(api) -> None:
    made = api.user.post("/api/v1/jobs", content=ELASTIC, headers={"content-type": "application/yaml"})
    assert made.status_code == 201, made.text
    job_id = made.json()["id"]
    for url in (f"/api/v1/jobs/{job_id}", "/api/v1/jobs", f"/jobs/{job_id}", "/jobs", f"/jobs/{job_id}/files"):
        assert api.user.get(url).status_code == 200, url
    assert api.admin.get("/api/v1/jobs").status_code == 200


def test_an_elastic_jobs_size_over_time_is_in_the_api_and_on_its_portal_page(db, tmp_path) -> None:
    from api.live_harness import live_api, running_job
    from portal.harness import PASSWORDS, signed_in
    from worlds import World

    from trainyard.services.auth import get_user
    from trainyard.services.passwords import set_password

    with live_api(db, tmp_path) as (api, controller):
        hog = running_job(api, controller, api.user_token, "hog", gpus=3)
        made = api.user.post("/api/v1/jobs", content=ELASTIC, headers={"content-type": "application/yaml"})
        job_id = made.json()["id"]
        world = World(db, api.ctx.backend, api.ctx.clock, controller)  # type: ignore[arg-type]
        world.drive(job_id, ("RUNNING",))
        assert api.user.post(f"/api/v1/jobs/{hog}/stop").status_code in (200, 202)
        world.drive(job_id, None, until=lambda _: any(k == "resized" for k, _ in world.events(job_id)),
                    what="the job to grow")
        [attempt] = api.user.get(f"/api/v1/jobs/{job_id}").json()["attempts"]
        assert [s["workers"] for s in attempt["sizes"]] == [1, 3]
        with db.session() as session:
            set_password(session, get_user(session, "admin"), "alice", PASSWORDS["alice"])
        page = signed_in(api, "alice").get(f"/jobs/{job_id}").text
        assert 'id="sizes">Workers: 1 <span class="hint">from ' in page and "→ 3 <span" in page
        assert '<h3 class="role">worker × 1 to 3 (elastic)</h3>' in page  # the job file, as written
        assert '<option value="worker/2">' in page  # the log selector: a worker the grow added
        listed = {j["id"]: j for j in api.user.get("/api/v1/jobs").json()["items"]}
        assert listed[job_id]["gpus"] == 3  # what it holds now (`yard jobs`' GPU column), not its minimum
