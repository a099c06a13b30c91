"""An elastic role in the job file: ``instances: {min: N, max: M}``."""

from __future__ import annotations

import pytest

from trainyard.spec.errors import SpecError
from trainyard.spec.loading import parse_job, validate_job

JOB = """
name: el
taskRoles:
  worker:
    instances: {min: 1, max: 3}
    resourcePerInstance: {gpu: 1}
    commands: [echo hi]
"""


def test_an_elastic_role_starts_at_its_minimum_and_is_stored_as_written() -> None:
    spec = parse_job(JOB)
    role = spec.taskRoles["worker"]
    assert (role.instances, role.maxInstances, spec.elastic_role, spec.task_count) == (1, 3, "worker", 1)
    stored = spec.model_dump(mode="json")
    assert stored["taskRoles"]["worker"]["instances"] == {"min": 1, "max": 3}
    assert "maxInstances" not in stored["taskRoles"]["worker"]
    assert validate_job(stored) == spec
    assert parse_job(JOB.replace("{min: 1, max: 3}", "2")).elastic_role is None


@pytest.mark.parametrize(("instances", "message"), [
    ("{min: 3, max: 1}", "taskRoles.worker.instances.max: is 1, below min (3)"),
    ("{min: 1}", "an elastic role's instances are {min: N, max: M}"),
    ("{min: 1, max: 2, step: 1}", "(unknown: step)"),
    ("{min: 0, max: 2}", "taskRoles.worker.instances.min: must be ≥ 1"),
    ("{min: 1, max: 2000}", "taskRoles.worker.instances.max: must be ≤ 1000"),
    ("{min: 1, max: many}", "taskRoles.worker.instances.max: must be a whole number (got 'many')"),
    ("1\n    maxInstances: 3", "maxInstances is not a field: an elastic role says instances: {min: N, max: M}"),
])
def test_a_bad_range_is_refused_at_its_field(instances: str, message: str) -> None:
    with pytest.raises(SpecError) as refused:
        parse_job(JOB.replace("{min: 1, max: 3}", instances))
    assert message in str(refused.value)


def test_one_elastic_role_per_job_and_no_elastic_whole_nodes() -> None:
    with pytest.raises(SpecError, match="only one role of a job may be elastic, and worker is"):
        parse_job(JOB + "  ps:\n    instances: {min: 1, max: 2}\n    commands: [echo]\n")
    with pytest.raises(SpecError, match="a whole-node role .nodes. cannot be elastic"):
        parse_job(JOB.replace("resourcePerInstance: {gpu: 1}", "nodes: 1"))


def test_a_backend_that_cannot_resize_refuses_an_elastic_job_at_its_field() -> None:
    from trainyard.services.errors import Invalid
    from trainyard.services.jobs import check_backend

    check_backend(parse_job(JOB), "local")
    check_backend(parse_job(JOB), "slurm")
    check_backend(parse_job(JOB.replace("{min: 1, max: 3}", "2")), "simulated")
    with pytest.raises(Invalid) as refused:
        check_backend(parse_job(JOB), "simulated")
    assert refused.value.details[0]["path"] == "taskRoles.worker.instances"
    assert "not on simulated" in refused.value.message
