"""``taskRoles.<role>.nodes``: whole-node roles in the job file, refused at their field paths
when mixed with what they cannot mean."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from spec_mutations import errors_of

from trainyard.scheduler.snapshot import TaskRequest
from trainyard.services.requests import task_requests
from trainyard.spec.errors import FieldError
from trainyard.spec.loading import validate_job
from trainyard.spec.templating import normalized_spec

WHOLE = "a whole-node role (nodes: 2) gets every GPU, all the CPU and all the memory of each node: leave {} out"


def whole_document(**role: Any) -> dict[str, Any]:
    return {"name": "demo", "taskRoles": {"trainer": {"nodes": 2, "commands": ["train"], **role}}}


def test_nodes_without_instances_runs_one_instance_per_node_taking_all_of_each() -> None:
    spec = validate_job(whole_document(resourcePerInstance={"gpuModel": "A100", "gpuMemoryMB": 40000}))
    assert spec.taskRoles["trainer"].instances == 2 and spec.task_count == 2
    assert task_requests(spec) == tuple(
        TaskRequest("trainer", i, 0, 0, 0, ("A100",), 40000, whole_node=True) for i in range(2)
    )


def test_instances_equal_to_nodes_is_accepted() -> None:
    assert validate_job(whole_document(instances=2)).taskRoles["trainer"].instances == 2


def test_the_stored_form_has_no_amounts_and_validates_to_the_same_spec() -> None:
    spec = validate_job(whole_document(resourcePerInstance={"gpuModel": ["H100"], "ports": {"http": 1}}))
    stored = normalized_spec(spec)
    assert stored["taskRoles"]["trainer"]["resourcePerInstance"] == {"gpuModel": ["H100"], "ports": {"http": 1}}
    assert validate_job(copy.deepcopy(stored)) == spec


def test_a_role_without_nodes_is_unchanged(minimal_document: dict[str, Any]) -> None:
    spec = validate_job(minimal_document)
    assert spec.taskRoles["worker"].nodes is None
    assert "nodes" not in normalized_spec(spec)["taskRoles"]["worker"]
    assert not any(t.whole_node for t in task_requests(spec))


def test_instances_that_differ_from_nodes_are_refused_at_instances() -> None:
    assert errors_of(whole_document(instances=3)) == [
        FieldError(
            "taskRoles.trainer.instances",
            "is 3 but nodes is 2: a whole-node role runs one instance per node; leave instances out "
            "(or make it equal to nodes)",
        )
    ]


@pytest.mark.parametrize(("field", "value"), [("gpu", 8), ("gpu", 0.5), ("cpu", 4), ("memoryMB", 1024)])
def test_amounts_beside_nodes_are_refused_at_their_field(field: str, value: float) -> None:
    (error,) = errors_of(whole_document(resourcePerInstance={field: value}))
    assert error.path == f"taskRoles.trainer.resourcePerInstance.{field}"
    assert error.message.startswith(WHOLE.format(field))
    assert "gpuModel and gpuMemoryMB choose the kind of node" in error.message


def test_a_selector_beside_nodes_is_refused_at_its_field_not_ignored() -> None:
    errors = errors_of(whole_document(resourcePerInstance={"selector": 'node.labels["ib"] == "true"'}))
    assert [(e.path, "chooses its kind of node with gpuModel and gpuMemoryMB" in e.message) for e in errors] == [
        ("taskRoles.trainer.resourcePerInstance.selector", True)]


def test_every_mixed_field_is_reported_at_once() -> None:
    errors = errors_of(whole_document(instances=1, resourcePerInstance={"gpu": 1, "cpu": 2, "memoryMB": 10}))
    assert [e.path for e in errors] == [
        "taskRoles.trainer.instances",
        "taskRoles.trainer.resourcePerInstance.gpu",
        "taskRoles.trainer.resourcePerInstance.cpu",
        "taskRoles.trainer.resourcePerInstance.memoryMB",
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "must be ≥ 1 (got 0)"),
        (1001, "must be ≤ 1000 (got 1001)"),
        ("two", "must be a whole number (got 'two')"),
        (True, "must be a whole number (got true)"),
        (1.5, "must be a whole number (got 1.5)"),
    ],
)
def test_a_node_count_that_is_no_positive_whole_number_is_refused(value: Any, message: str) -> None:
    errors = errors_of(whole_document(nodes=value))
    assert FieldError("taskRoles.trainer.nodes", message) in errors
