"""The API reads jobs through the one cache of parsed job files (services/specs.py)."""

from __future__ import annotations

from typing import Any

import pytest
from api.harness import Api

from trainyard.services import specs as specs_module

JOB = {"name": "cached", "taskRoles": {"main": {"commands": ["true"]}}}


def test_showing_a_job_parses_its_stored_file_once(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    job_id = api.user.post("/api/v1/jobs", json=JOB).json()["id"]
    parses: list[Any] = []
    real = specs_module.validate_job
    monkeypatch.setattr(specs_module, "validate_job", lambda data: parses.append(data) or real(data))
    for _ in range(2):
        shown = api.user.get(f"/api/v1/jobs/{job_id}")
        assert shown.status_code == 200 and shown.json()["spec"]["name"] == "cached"
    assert len(parses) == 1
    assert api.ctx.specs.known(job_id) is not None
