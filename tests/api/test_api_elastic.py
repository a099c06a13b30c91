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
