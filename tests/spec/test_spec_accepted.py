"""What the job file accepts: relaxed defaults, fractional resources, coercions, helpers."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from trainyard.core.resources import to_milli
from trainyard.spec.errors import FieldError, SpecError
from trainyard.spec.loading import parse_job, validate_job
from trainyard.spec.models import JobSpec, Priority


def errors_of(document: Any) -> list[FieldError]:
    with pytest.raises(SpecError) as caught:
        validate_job(document)
    return caught.value.errors


def test_a_minimal_relaxed_job_gets_openpai_and_trainyard_defaults() -> None:
    spec = validate_job({"name": "hello", "taskRoles": {"main": {"commands": ["echo hi"]}}})

    assert spec.protocolVersion == 2
    assert spec.type == "job"
    assert spec.jobRetryCount == 0
    assert spec.defaults.virtualCluster == "default"
    assert spec.priority == "normal"
    assert spec.stopGracePeriodSeconds == 30
    assert spec.tags == []
    main = spec.taskRoles["main"]
    assert main.instances == 1
    assert main.taskRetryCount == 0
    assert main.dockerImage is None
    assert (main.completion.minFailedInstances, main.completion.minSucceededInstances) == (1, -1)
    resources = main.resourcePerInstance
    assert (resources.gpu, resources.cpu, resources.memoryMB, resources.ports) == (0, 1, 1024, {})
    assert (to_milli(resources.gpu), to_milli(resources.cpu)) == (0, 1000)


def test_empty_sections_are_taken_as_their_defaults() -> None:
    spec = validate_job(
        {
            "name": "hello",
            "parameters": None,
            "secrets": None,
            "defaults": None,
            "tags": None,
            "taskRoles": {
                "main": {
                    "commands": ["run"],
                    "env": None,
                    "completion": None,
                    "resourcePerInstance": None,
                },
            },
        }
    )

    assert spec.parameters == {} and spec.secrets == {} and spec.tags == []
    assert spec.defaults.virtualCluster == "default"
    assert spec.taskRoles["main"].env == {}
    assert spec.taskRoles["main"].resourcePerInstance.memoryMB == 1024


@pytest.mark.parametrize(("gpu", "milli"), [(0.5, 500), (0.25, 250), (0.001, 1), (0.999, 999)])
def test_a_fraction_of_a_gpu_is_accepted_and_counted_in_thousandths(gpu: float, milli: int) -> None:
    spec = validate_job(
        {
            "name": "share",
            "taskRoles": {"main": {"commands": ["run"], "resourcePerInstance": {"gpu": gpu}}},
        }
    )

    assert spec.taskRoles["main"].resourcePerInstance.gpu == gpu
    assert to_milli(spec.taskRoles["main"].resourcePerInstance.gpu) == milli


def test_whole_gpu_and_cpu_counts_written_as_floats_are_stored_as_integers() -> None:
    spec = validate_job(
        {
            "name": "x",
            "taskRoles": {
                "main": {"commands": ["run"], "resourcePerInstance": {"gpu": 2.0, "cpu": 4.0}}
            },
        }
    )

    resources = spec.taskRoles["main"].resourcePerInstance
    assert resources.gpu == 2 and isinstance(resources.gpu, int)
    assert resources.cpu == 4 and isinstance(resources.cpu, int)
    assert to_milli(resources.gpu) == 2000


def test_fractional_cpus_are_accepted() -> None:
    spec = validate_job(
        {
            "name": "x",
            "taskRoles": {"main": {"commands": ["run"], "resourcePerInstance": {"cpu": 0.5}}},
        }
    )

    assert to_milli(spec.taskRoles["main"].resourcePerInstance.cpu) == 500


def test_a_single_gpu_model_is_turned_into_a_list() -> None:
    spec = validate_job(
        {
            "name": "x",
            "taskRoles": {
                "main": {
                    "commands": ["run"],
                    "resourcePerInstance": {"gpu": 1, "gpuModel": "A100", "gpuMemoryMB": 40960},
                }
            },
        }
    )

    assert spec.taskRoles["main"].resourcePerInstance.gpuModel == ["A100"]
    assert spec.taskRoles["main"].resourcePerInstance.gpuMemoryMB == 40960


def test_environment_values_given_as_numbers_or_booleans_become_strings() -> None:
    spec = validate_job(
        {
            "name": "x",
            "taskRoles": {
                "main": {
                    "commands": ["run"],
                    "env": {
                        "EPOCHS": 10,
                        "LR": 0.1,
                        "DEBUG": True,
                        "QUIET": False,
                        "NAME": "resnet",
                    },
                }
            },
        }
    )

    assert spec.taskRoles["main"].env == {
        "EPOCHS": "10",
        "LR": "0.1",
        "DEBUG": "true",
        "QUIET": "false",
        "NAME": "resnet",
    }


def test_protocol_version_may_be_written_as_a_string() -> None:
    spec = validate_job(
        {"protocolVersion": "2", "name": "x", "taskRoles": {"main": {"commands": ["run"]}}}
    )

    assert spec.protocolVersion == 2


def test_priorities_rank_from_prod_down_to_oppo() -> None:
    assert [p.rank for p in (Priority.PROD, Priority.NORMAL, Priority.LOW, Priority.OPPO)] == [
        0,
        1,
        2,
        3,
    ]
    assert Priority("oppo") is Priority.OPPO
    assert Priority.PROD == "prod"


def test_task_count_sums_instances_and_role_names_keep_declaration_order() -> None:
    spec = validate_job(
        {
            "name": "x",
            "taskRoles": {
                "zeta": {"instances": 3, "commands": ["a"]},
                "alpha": {"instances": 2, "commands": ["b"]},
                "mid": {"commands": ["c"]},
            },
        }
    )

    assert spec.task_count == 6
    assert spec.role_names == ["zeta", "alpha", "mid"]


def test_every_problem_is_reported_at_once_one_per_line() -> None:
    error_list = errors_of(
        {
            "name": "bad name",
            "jobRetryCount": -1,
            "taskRoles": {"worker": {"instances": 0, "commands": []}},
        }
    )

    assert error_list == [
        FieldError("name", "may contain only letters, digits, '_' and '-' (got 'bad name')"),
        FieldError("jobRetryCount", "must be ≥ 0 (got -1)"),
        FieldError("taskRoles.worker.instances", "must be ≥ 1 (got 0)"),
        FieldError("taskRoles.worker.commands", "must list at least one command"),
    ]
    assert str(SpecError(error_list)).splitlines() == [str(error) for error in error_list]


def test_a_document_that_is_not_a_mapping_is_rejected_clearly() -> None:
    assert errors_of(["name", "x"]) == [
        FieldError(  # type: ignore[arg-type]
            "<document>",
            "the job file must be a mapping of fields such as name and taskRoles (got a list)",
        )
    ]


def test_unknown_fields_inside_free_form_sections_are_kept() -> None:
    spec = validate_job(
        {
            "name": "x",
            "parameters": {"anything": {"goes": [1, 2]}},
            "secrets": {"nested": {"token": "t"}},
            "prerequisites": [{"name": "d", "type": "data", "uri": ["u"], "custom": True}],
            "extras": {"my.plugin": {"deep": None}},
            "taskRoles": {
                "main": {
                    "commands": ["run"],
                    "extraContainerOptions": {"shmMB": 1, "infiniband": True},
                }
            },
        }
    )

    assert spec.prerequisites == [{"name": "d", "type": "data", "uri": ["u"], "custom": True}]
    assert spec.extras == {"my.plugin": {"deep": None}}


def test_building_the_model_directly_enforces_the_cross_field_rules_too() -> None:
    with pytest.raises(ValidationError, match="unknown parameter 'lr'"):
        JobSpec.model_validate(
            {"name": "x", "taskRoles": {"main": {"commands": ["run <% $parameters.lr %>"]}}}
        )


def test_a_spec_is_immutable() -> None:
    spec = validate_job({"name": "x", "taskRoles": {"main": {"commands": ["run"]}}})

    with pytest.raises(ValidationError):
        spec.name = "y"  # type: ignore[misc]


def test_a_roles_environment_wins_over_the_jobs_and_each_named_one_keeps_its_first_path() -> None:
    spec = parse_job(
        "name: envs\nenvironment: torch\ntaskRoles:\n"
        "  trainer: {commands: [train]}\n"
        "  evaluator: {environment: jax, commands: [evaluate]}\n"
    )
    assert spec.environment_of("trainer") == "torch" and spec.environment_of("evaluator") == "jax"
    assert spec.environment_paths() == {"torch": "environment", "jax": "taskRoles.evaluator.environment"}
    assert parse_job("name: plain\ntaskRoles: {main: {commands: [run]}}\n").environment_of("main") is None
