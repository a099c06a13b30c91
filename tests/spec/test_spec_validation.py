"""Every validation rule of the job file, each reported at its exact field path."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError

from trainyard.spec.errors import FieldError, SpecError
from trainyard.spec.loading import validate_job
from trainyard.spec.models import JobSpec, Priority

Mutation = Callable[[dict[str, Any]], None]


def errors_of(document: dict[str, Any]) -> list[FieldError]:
    with pytest.raises(SpecError) as caught:
        validate_job(document)
    return caught.value.errors


def setting(*keys: str, value: Any) -> Mutation:
    """A mutation that sets document[k1][k2]…[kn] = value, creating maps on the way."""

    def mutate(document: dict[str, Any]) -> None:
        target = document
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = value

    return mutate


def removing(*keys: str) -> Mutation:
    def mutate(document: dict[str, Any]) -> None:
        target = document
        for key in keys[:-1]:
            target = target[key]
        del target[keys[-1]]

    return mutate


def renaming_role(new_name: str) -> Mutation:
    def mutate(document: dict[str, Any]) -> None:
        document["taskRoles"] = {new_name: document["taskRoles"].pop("worker")}

    return mutate


W = ("taskRoles", "worker")
R = (*W, "resourcePerInstance")

CASES: list[tuple[str, Mutation, str, str]] = [
    # --- the job ------------------------------------------------------------------
    ("a job needs a name", removing("name"), "name", "is required"),
    (
        "a job name with a space is rejected",
        setting("name", value="my job"),
        "name",
        "may contain only letters, digits, '_' and '-' (got 'my job')",
    ),
    (
        "a job name with a dot is rejected as in OpenPAI",
        setting("name", value="v1.2"),
        "name",
        "may contain only letters, digits, '_' and '-' (got 'v1.2')",
    ),
    (
        "a job name longer than 255 characters is rejected",
        setting("name", value="a" * 256),
        "name",
        "must be at most 255 characters (got 256)",
    ),
    (
        "only protocol version 2 is understood",
        setting("protocolVersion", value=1),
        "protocolVersion",
        "only protocol version 2 is supported (got 1)",
    ),
    ("the type must be job", setting("type", value="data"), "type", "must be 'job' (got 'data')"),
    (
        "a job retry count above 100 is rejected",
        setting("jobRetryCount", value=101),
        "jobRetryCount",
        "must be ≤ 100 (got 101)",
    ),
    (
        "an unknown priority lists the known ones",
        setting("priority", value="high"),
        "priority",
        "must be one of 'prod', 'normal', 'low' or 'oppo' (got 'high')",
    ),
    (
        "a stop grace period above an hour is rejected",
        setting("stopGracePeriodSeconds", value=3601),
        "stopGracePeriodSeconds",
        "must be ≤ 3600 (got 3601)",
    ),
    (
        "a negative stop grace period is rejected",
        setting("stopGracePeriodSeconds", value=-1),
        "stopGracePeriodSeconds",
        "must be ≥ 0 (got -1)",
    ),
    ("an empty tag is rejected", setting("tags", value=["ok", " "]), "tags[1]", "must not be empty"),
    (
        "a job without task roles is rejected",
        setting("taskRoles", value={}),
        "taskRoles",
        "must list at least one task role",
    ),
    (
        "parameters must be a mapping",
        setting("parameters", value=["lr"]),
        "parameters",
        "must be a mapping (got a list)",
    ),
    (
        "a top-level completion is not part of the protocol",
        setting("completion", value={"minFailedInstances": 1}),
        "completion",
        "unknown field (allowed here: protocolVersion, name, type, version, contributor, "
        "description, prerequisites, parameters, secrets, jobRetryCount, taskRoles, deployments, "
        "defaults, extras, priority, stopGracePeriodSeconds, tags)",
    ),
    # --- task roles -----------------------------------------------------------------
    (
        "a role name with a dash is rejected because it cannot be part of a variable name",
        renaming_role("ps-server"),
        "taskRoles.ps-server",
        "task role names must start with a letter or '_', contain only letters, digits and "
        "'_', and be at most 64 characters (they become part of environment variable names)",
    ),
    (
        "a role name starting with a digit is rejected",
        renaming_role("1worker"),
        "taskRoles.1worker",
        "task role names must start with a letter or '_', contain only letters, digits and "
        "'_', and be at most 64 characters (they become part of environment variable names)",
    ),
    (
        "a role name longer than 64 characters is rejected",
        renaming_role("w" * 65),
        "taskRoles." + "w" * 65,
        "task role names must start with a letter or '_', contain only letters, digits and "
        "'_', and be at most 64 characters (they become part of environment variable names)",
    ),
    ("zero instances are rejected", setting(*W, "instances", value=0),
     "taskRoles.worker.instances", "must be ≥ 1 (got 0)"),
    ("more than 1000 instances are rejected", setting(*W, "instances", value=1001),
     "taskRoles.worker.instances", "must be ≤ 1000 (got 1001)"),
    ("a fractional instance count is rejected", setting(*W, "instances", value=2.5),
     "taskRoles.worker.instances", "must be a whole number (got 2.5)"),
    ("an instance count written as a string is rejected", setting(*W, "instances", value="3"),
     "taskRoles.worker.instances", "must be a whole number (got '3')"),
    ("an instance count written as a boolean is rejected", setting(*W, "instances", value=True),
     "taskRoles.worker.instances", "must be a whole number (got true)"),
    ("a negative task retry count is rejected", setting(*W, "taskRetryCount", value=-1),
     "taskRoles.worker.taskRetryCount", "must be ≥ 0 (got -1)"),
    ("a task retry count above 100 is rejected", setting(*W, "taskRetryCount", value=101),
     "taskRoles.worker.taskRetryCount", "must be ≤ 100 (got 101)"),
    (
        "zero failed instances to fail the job is rejected",
        setting(*W, "completion", "minFailedInstances", value=0),
        "taskRoles.worker.completion.minFailedInstances",
        "must be -1 or null (never fail the job), or ≥ 1 (got 0)",
    ),
    (
        "more failed instances than instances is rejected",
        setting(*W, "completion", "minFailedInstances", value=3),
        "taskRoles.worker.completion.minFailedInstances",
        "must be -1, null, or between 1 and instances (2) (got 3)",
    ),
    (
        "minus two succeeded instances is rejected",
        setting(*W, "completion", "minSucceededInstances", value=-2),
        "taskRoles.worker.completion.minSucceededInstances",
        "must be -1 or null (all instances must succeed), or ≥ 1 (got -2)",
    ),
    (
        "more succeeded instances than instances is rejected",
        setting(*W, "completion", "minSucceededInstances", value=5),
        "taskRoles.worker.completion.minSucceededInstances",
        "must be -1, null, or between 1 and instances (2) (got 5)",
    ),
    ("a role without commands is rejected", removing(*W, "commands"),
     "taskRoles.worker.commands", "is required"),
    ("an empty command list is rejected", setting(*W, "commands", value=[]),
     "taskRoles.worker.commands", "must list at least one command"),
    ("a blank command is rejected", setting(*W, "commands", value=["echo", "  "]),
     "taskRoles.worker.commands[1]", "must not be empty"),
    ("a command that is a number is rejected", setting(*W, "commands", value=[42]),
     "taskRoles.worker.commands[0]", "must be a string (got 42)"),
    ("commands given as one string are rejected", setting(*W, "commands", value="echo hi"),
     "taskRoles.worker.commands", "must be a list (got 'echo hi')"),
    (
        "an environment variable name with a dash is rejected",
        setting(*W, "env", value={"MY-VAR": "1"}),
        "taskRoles.worker.env.MY-VAR",
        "not a valid environment variable name (letters, digits and '_', not starting with a digit)",
    ),
    ("an environment value that is a list is rejected", setting(*W, "env", value={"A": [1]}),
     "taskRoles.worker.env.A", "must be a string, number or boolean (got a list)"),
    (
        "a docker image that names no prerequisite is rejected",
        setting(*W, "dockerImage", value="pytorch"),
        "taskRoles.worker.dockerImage",
        "no dockerimage prerequisite named 'pytorch'; declare it under prerequisites "
        "(- name: pytorch, type: dockerimage, uri: …)",
    ),
    # --- resources --------------------------------------------------------------------
    ("a negative gpu count is rejected", setting(*R, "gpu", value=-1),
     "taskRoles.worker.resourcePerInstance.gpu", "must be ≥ 0 (got -1)"),
    (
        "one and a half gpus are rejected",
        setting(*R, "gpu", value=1.5),
        "taskRoles.worker.resourcePerInstance.gpu",
        "must be a whole number of GPUs, or a fraction below 1 to share one GPU (got 1.5)",
    ),
    (
        "a gpu fraction finer than a thousandth is rejected",
        setting(*R, "gpu", value=0.0005),
        "taskRoles.worker.resourcePerInstance.gpu",
        "a GPU fraction must be a multiple of 0.001 (got 0.0005)",
    ),
    ("a gpu count written as a string is rejected", setting(*R, "gpu", value="1"),
     "taskRoles.worker.resourcePerInstance.gpu", "must be a number (got '1')"),
    ("zero cpus are rejected", setting(*R, "cpu", value=0),
     "taskRoles.worker.resourcePerInstance.cpu", "must be > 0 (got 0)"),
    ("zero memory is rejected", setting(*R, "memoryMB", value=0),
     "taskRoles.worker.resourcePerInstance.memoryMB", "must be ≥ 1 (got 0)"),
    ("zero gpu memory is rejected", setting(*R, "gpuMemoryMB", value=0),
     "taskRoles.worker.resourcePerInstance.gpuMemoryMB", "must be ≥ 1 (got 0)"),
    ("an empty gpu model list is rejected", setting(*R, "gpuModel", value=[]),
     "taskRoles.worker.resourcePerInstance.gpuModel",
     "must list at least one GPU model, or be left out"),
    ("a negative port count is rejected", setting(*R, "ports", value={"ssh": -1}),
     "taskRoles.worker.resourcePerInstance.ports.ssh", "must be ≥ 0 (got -1)"),
    (
        "a port label with a dash is rejected",
        setting(*R, "ports", value={"my-port": 1}),
        "taskRoles.worker.resourcePerInstance.ports.my-port",
        "port labels must start with a letter or '_' and contain only letters, digits and '_'",
    ),
    # --- unknown fields ---------------------------------------------------------------
    ("a misspelt field suggests the right one", setting(*W, "instancez", value=2),
     "taskRoles.worker.instancez", "unknown field; did you mean 'instances'?"),
    ("a misspelt resource suggests the right one", setting(*R, "gpus", value=2),
     "taskRoles.worker.resourcePerInstance.gpus", "unknown field; did you mean 'gpu'?"),
    ("a wrongly cased field suggests the right one", setting("taskroles", value={}),
     "taskroles", "unknown field; did you mean 'taskRoles'?"),
    ("a misspelt completion field suggests the right one",
     setting(*W, "completion", "minFailedInstance", value=1),
     "taskRoles.worker.completion.minFailedInstance",
     "unknown field; did you mean 'minFailedInstances'?"),
    ("a misspelt defaults field suggests the right one",
     setting("defaults", "virtualcluster", value="a"),
     "defaults.virtualcluster", "unknown field; did you mean 'virtualCluster'?"),
    # --- prerequisites and deployments -----------------------------------------------
    (
        "a prerequisite of an unknown type is rejected",
        setting("prerequisites", value=[{"name": "img", "type": "image", "uri": "x"}]),
        "prerequisites[0].type",
        "must be one of dockerimage, data, script, output (got 'image')",
    ),
    (
        "a default deployment that does not exist is rejected",
        setting("defaults", "deployment", value="prod"),
        "defaults.deployment",
        "no deployment named 'prod'",
    ),
    (
        "a deployment for a role that does not exist is rejected",
        setting("deployments", value=[{"name": "prod", "taskRoles": {"ps": {"preCommands": ["x"]}}}]),
        "deployments[0].taskRoles.ps",
        "no task role named 'ps' (task roles: worker)",
    ),
    # --- placeholders -----------------------------------------------------------------
    (
        "a command using an unknown parameter is rejected at that command",
        setting(*W, "commands", value=["python train.py --lr <% $parameters.lr %>"]),
        "taskRoles.worker.commands[0]",
        "unknown parameter 'lr'",
    ),
    (
        "an environment value using an unknown secret is rejected at that variable",
        setting(*W, "env", value={"TOKEN": "<% $secrets.token %>"}),
        "taskRoles.worker.env.TOKEN",
        "unknown secret 'token'",
    ),
    (
        "an unknown nested parameter is named with its full path",
        lambda d: (d.update(parameters={"optim": {"lr": 0.1}}),
                   setting(*W, "commands", value=["x <% $parameters.optim.beta %>"])(d)),
        "taskRoles.worker.commands[0]",
        "unknown parameter 'optim.beta'",
    ),
    (
        "a placeholder that is not a reference is rejected",
        setting(*W, "commands", value=["echo <% lr %>"]),
        "taskRoles.worker.commands[0]",
        "cannot read placeholder '<% lr %>'; write it as <% $parameters.name %> "
        "or <% $secrets.name %>",
    ),
    (
        "an unclosed placeholder is rejected",
        setting(*W, "commands", value=["echo <% $parameters.lr"]),
        "taskRoles.worker.commands[0]",
        "unclosed placeholder '<%'; close it with '%>'",
    ),
    (
        "a reference to data in a role that selects none is rejected",
        setting(*W, "commands", value=["ls <% $data.name %>"]),
        "taskRoles.worker.commands[0]",
        "'$data' is used but this task role selects no data prerequisite "
        "(set taskRoles.<role>.data)",
    ),
    (
        "a reference to an unknown root is rejected",
        setting(*W, "commands", value=["echo <% $params.lr %>"]),
        "taskRoles.worker.commands[0]",
        "unknown reference '$params' in '<% $params.lr %>'; use $parameters.<name> "
        "or $secrets.<name>",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "path", "message"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_each_invalid_field_is_reported_at_its_path(
    minimal_document: dict[str, Any], mutate: Mutation, path: str, message: str
) -> None:
    document = copy.deepcopy(minimal_document)
    mutate(document)

    assert errors_of(document) == [FieldError(path, message)]


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
    assert (resources.gpu_milli, resources.cpu_milli) == (0, 1000)


def test_empty_sections_are_taken_as_their_defaults() -> None:
    spec = validate_job(
        {
            "name": "hello",
            "parameters": None,
            "secrets": None,
            "defaults": None,
            "tags": None,
            "taskRoles": {
                "main": {"commands": ["run"], "env": None, "completion": None,
                         "resourcePerInstance": None},
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
        {"name": "share", "taskRoles": {"main": {"commands": ["run"],
                                                 "resourcePerInstance": {"gpu": gpu}}}}
    )

    assert spec.taskRoles["main"].resourcePerInstance.gpu == gpu
    assert spec.taskRoles["main"].resourcePerInstance.gpu_milli == milli


def test_whole_gpu_and_cpu_counts_written_as_floats_are_stored_as_integers() -> None:
    spec = validate_job(
        {"name": "x", "taskRoles": {"main": {"commands": ["run"],
                                             "resourcePerInstance": {"gpu": 2.0, "cpu": 4.0}}}}
    )

    resources = spec.taskRoles["main"].resourcePerInstance
    assert resources.gpu == 2 and isinstance(resources.gpu, int)
    assert resources.cpu == 4 and isinstance(resources.cpu, int)
    assert resources.gpu_milli == 2000


def test_fractional_cpus_are_accepted() -> None:
    spec = validate_job(
        {"name": "x", "taskRoles": {"main": {"commands": ["run"],
                                             "resourcePerInstance": {"cpu": 0.5}}}}
    )

    assert spec.taskRoles["main"].resourcePerInstance.cpu_milli == 500


def test_a_single_gpu_model_is_turned_into_a_list() -> None:
    spec = validate_job(
        {"name": "x", "taskRoles": {"main": {"commands": ["run"], "resourcePerInstance": {
            "gpu": 1, "gpuModel": "A100", "gpuMemoryMB": 40960}}}}
    )

    assert spec.taskRoles["main"].resourcePerInstance.gpuModel == ["A100"]
    assert spec.taskRoles["main"].resourcePerInstance.gpuMemoryMB == 40960


def test_environment_values_given_as_numbers_or_booleans_become_strings() -> None:
    spec = validate_job(
        {"name": "x", "taskRoles": {"main": {"commands": ["run"], "env": {
            "EPOCHS": 10, "LR": 0.1, "DEBUG": True, "QUIET": False, "NAME": "resnet"}}}}
    )

    assert spec.taskRoles["main"].env == {
        "EPOCHS": "10", "LR": "0.1", "DEBUG": "true", "QUIET": "false", "NAME": "resnet"
    }


def test_protocol_version_may_be_written_as_a_string() -> None:
    spec = validate_job({"protocolVersion": "2", "name": "x",
                         "taskRoles": {"main": {"commands": ["run"]}}})

    assert spec.protocolVersion == 2


def test_priorities_rank_from_prod_down_to_oppo() -> None:
    assert [p.rank for p in (Priority.PROD, Priority.NORMAL, Priority.LOW, Priority.OPPO)] == [
        0, 1, 2, 3
    ]
    assert Priority("oppo") is Priority.OPPO
    assert Priority.PROD == "prod"


def test_task_count_sums_instances_and_role_names_keep_declaration_order() -> None:
    spec = validate_job({"name": "x", "taskRoles": {
        "zeta": {"instances": 3, "commands": ["a"]},
        "alpha": {"instances": 2, "commands": ["b"]},
        "mid": {"commands": ["c"]},
    }})

    assert spec.task_count == 6
    assert spec.role_names == ["zeta", "alpha", "mid"]


def test_every_problem_is_reported_at_once_one_per_line() -> None:
    error_list = errors_of({"name": "bad name", "jobRetryCount": -1, "taskRoles": {
        "worker": {"instances": 0, "commands": []}}})

    assert error_list == [
        FieldError("name", "may contain only letters, digits, '_' and '-' (got 'bad name')"),
        FieldError("jobRetryCount", "must be ≥ 0 (got -1)"),
        FieldError("taskRoles.worker.instances", "must be ≥ 1 (got 0)"),
        FieldError("taskRoles.worker.commands", "must list at least one command"),
    ]
    assert str(SpecError(error_list)).splitlines() == [str(error) for error in error_list]


def test_a_document_that_is_not_a_mapping_is_rejected_clearly() -> None:
    assert errors_of(["name", "x"]) == [FieldError(  # type: ignore[arg-type]
        "<document>",
        "the job file must be a mapping of fields such as name and taskRoles (got a list)",
    )]


def test_unknown_fields_inside_free_form_sections_are_kept() -> None:
    spec = validate_job({
        "name": "x",
        "parameters": {"anything": {"goes": [1, 2]}},
        "secrets": {"nested": {"token": "t"}},
        "prerequisites": [{"name": "d", "type": "data", "uri": ["u"], "custom": True}],
        "extras": {"my.plugin": {"deep": None}},
        "taskRoles": {"main": {"commands": ["run"], "extraContainerOptions": {"shmMB": 1,
                                                                            "infiniband": True}}},
    })

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
