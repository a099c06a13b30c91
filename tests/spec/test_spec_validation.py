"""Every field-level rule of the job file, each reported at its exact field path."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from spec_mutations import Mutation, R, W, errors_of, removing, renaming_role, setting

from trainyard.spec.checks import qualified_image
from trainyard.spec.errors import FieldError, SpecError
from trainyard.spec.loading import parse_job

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
    (
        "an empty tag is rejected",
        setting("tags", value=["ok", " "]),
        "tags[1]",
        "must not be empty",
    ),
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
        "description, prerequisites, image, parameters, secrets, jobRetryCount, taskRoles, deployments, "
        "defaults, extras, priority, stopGracePeriodSeconds, maxRunTimeSeconds, tags, storages, datasets, preemption, "
        "suspendGracePeriodSeconds, suspendSignal, watchdogSeconds, environment, dependencies, workdir, notify)",
    ),
    (
        "an environment is named as `yard env` names it",
        setting("environment", value="My Env"),
        "environment",
        "must name an environment: lowercase letters, digits, '_' and '-', starting with a letter "
        "(got 'My Env'); see `yard env list`",
    ),
    (
        "a role's environment is named the same way",
        setting("taskRoles", "worker", "environment", value="../escape"),
        "taskRoles.worker.environment",
        "must name an environment: lowercase letters, digits, '_' and '-', starting with a letter "
        "(got '../escape'); see `yard env list`",
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
    (
        "zero instances are rejected",
        setting(*W, "instances", value=0),
        "taskRoles.worker.instances",
        "must be ≥ 1 (got 0)",
    ),
    (
        "more than 1000 instances are rejected",
        setting(*W, "instances", value=1001),
        "taskRoles.worker.instances",
        "must be ≤ 1000 (got 1001)",
    ),
    (
        "a fractional instance count is rejected",
        setting(*W, "instances", value=2.5),
        "taskRoles.worker.instances",
        "must be a whole number (got 2.5)",
    ),
    (
        "an instance count written as a string is rejected",
        setting(*W, "instances", value="3"),
        "taskRoles.worker.instances",
        "must be a whole number (got '3')",
    ),
    (
        "an instance count written as a boolean is rejected",
        setting(*W, "instances", value=True),
        "taskRoles.worker.instances",
        "must be a whole number (got true)",
    ),
    (
        "a negative task retry count is rejected",
        setting(*W, "taskRetryCount", value=-1),
        "taskRoles.worker.taskRetryCount",
        "must be ≥ 0 (got -1)",
    ),
    (
        "a task retry count above 100 is rejected",
        setting(*W, "taskRetryCount", value=101),
        "taskRoles.worker.taskRetryCount",
        "must be ≤ 100 (got 101)",
    ),
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
    (
        "a role without commands is rejected",
        removing(*W, "commands"),
        "taskRoles.worker.commands",
        "is required",
    ),
    (
        "an empty command list is rejected",
        setting(*W, "commands", value=[]),
        "taskRoles.worker.commands",
        "must list at least one command",
    ),
    (
        "a blank command is rejected",
        setting(*W, "commands", value=["echo", "  "]),
        "taskRoles.worker.commands[1]",
        "must not be empty",
    ),
    (
        "a command that is a number is rejected",
        setting(*W, "commands", value=[42]),
        "taskRoles.worker.commands[0]",
        "must be a string (got 42)",
    ),
    (
        "commands given as one string are rejected",
        setting(*W, "commands", value="echo hi"),
        "taskRoles.worker.commands",
        "must be a list (got 'echo hi')",
    ),
    (
        "an environment variable name with a dash is rejected",
        setting(*W, "env", value={"MY-VAR": "1"}),
        "taskRoles.worker.env.MY-VAR",
        "not a valid environment variable name "
        "(letters, digits and '_', not starting with a digit)",
    ),
    (
        "an environment value that is a list is rejected",
        setting(*W, "env", value={"A": [1]}),
        "taskRoles.worker.env.A",
        "must be a string, number or boolean (got a list)",
    ),
    (
        "a docker image that names no prerequisite is rejected",
        setting(*W, "dockerImage", value="pytorch"),
        "taskRoles.worker.dockerImage",
        "no dockerimage prerequisite named 'pytorch'; declare it under prerequisites "
        "(- name: pytorch, type: dockerimage, uri: …)",
    ),
    # --- resources --------------------------------------------------------------------
    (
        "a negative gpu count is rejected",
        setting(*R, "gpu", value=-1),
        "taskRoles.worker.resourcePerInstance.gpu",
        "must be ≥ 0 (got -1)",
    ),
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
    (
        "a gpu count written as a string is rejected",
        setting(*R, "gpu", value="1"),
        "taskRoles.worker.resourcePerInstance.gpu",
        "must be a number (got '1')",
    ),
    (
        "zero cpus are rejected",
        setting(*R, "cpu", value=0),
        "taskRoles.worker.resourcePerInstance.cpu",
        "must be > 0 (got 0)",
    ),
    (
        "zero memory is rejected",
        setting(*R, "memoryMB", value=0),
        "taskRoles.worker.resourcePerInstance.memoryMB",
        "must be ≥ 1 (got 0)",
    ),
    (
        "zero gpu memory is rejected",
        setting(*R, "gpuMemoryMB", value=0),
        "taskRoles.worker.resourcePerInstance.gpuMemoryMB",
        "must be ≥ 1 (got 0)",
    ),
    (
        "an empty gpu model list is rejected",
        setting(*R, "gpuModel", value=[]),
        "taskRoles.worker.resourcePerInstance.gpuModel",
        "must list at least one GPU model, or be left out",
    ),
    (
        "a negative port count is rejected",
        setting(*R, "ports", value={"ssh": -1}),
        "taskRoles.worker.resourcePerInstance.ports.ssh",
        "must be ≥ 0 (got -1)",
    ),
    (
        "a port label with a dash is rejected",
        setting(*R, "ports", value={"my-port": 1}),
        "taskRoles.worker.resourcePerInstance.ports.my-port",
        "port labels must start with a letter or '_' and contain only letters, digits and '_'",
    ),
    # --- unknown fields ---------------------------------------------------------------
    (
        "a misspelt field suggests the right one",
        setting(*W, "instancez", value=2),
        "taskRoles.worker.instancez",
        "unknown field; did you mean 'instances'?",
    ),
    (
        "a misspelt resource suggests the right one",
        setting(*R, "gpus", value=2),
        "taskRoles.worker.resourcePerInstance.gpus",
        "unknown field; did you mean 'gpu'?",
    ),
    (
        "a wrongly cased field suggests the right one",
        setting("taskroles", value={}),
        "taskroles",
        "unknown field; did you mean 'taskRoles'?",
    ),
    (
        "a misspelt completion field suggests the right one",
        setting(*W, "completion", "minFailedInstance", value=1),
        "taskRoles.worker.completion.minFailedInstance",
        "unknown field; did you mean 'minFailedInstances'?",
    ),
    (
        "a misspelt defaults field suggests the right one",
        setting("defaults", "virtualcluster", value="a"),
        "defaults.virtualcluster",
        "unknown field; did you mean 'virtualCluster'?",
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


def test_the_most_specific_image_wins_role_image_then_docker_image_then_the_jobs() -> None:
    spec = parse_job(
        "name: x\nimage: python:3.12\n"
        "prerequisites: [{name: torch, type: dockerimage, uri: 'registry.example.com/torch:2'}]\n"
        "taskRoles:\n"
        "  own: {image: 'localhost/trainyard-test:bookworm', commands: [run]}\n"
        "  pai: {dockerImage: torch, commands: [run]}\n"
        "  plain: {commands: [run]}\n"
    )

    assert spec.role_image("own") == "localhost/trainyard-test:bookworm"
    assert spec.role_image("pai") == "registry.example.com/torch:2"
    assert spec.role_image("plain") == "docker.io/library/python:3.12"
    assert parse_job("name: x\ntaskRoles: {m: {commands: [run]}}").role_image("m") is None


@pytest.mark.parametrize(("short", "full"), [
    ("ubuntu", "docker.io/library/ubuntu:latest"),
    ("ubuntu:22.04", "docker.io/library/ubuntu:22.04"),
    ("tensorflow/tensorflow:2.15.0", "docker.io/tensorflow/tensorflow:2.15.0"),
    ("docker.io/ubuntu", "docker.io/library/ubuntu:latest"),
    ("index.docker.io/library/ubuntu:22.04", "docker.io/library/ubuntu:22.04"),
    ("python@sha256:0123", "docker.io/library/python@sha256:0123"),
    ("team/train@sha256:0123", "docker.io/team/train@sha256:0123"),
    # A first component with a '.' or a ':', or localhost, is a registry.
    ("nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io/nvidia/pytorch:24.01-py3"),
    ("registry.example.com:5000/team/train", "registry.example.com:5000/team/train:latest"),
    ("localhost:5000/train:v2", "localhost:5000/train:v2"),
    ("localhost/trainyard-test:1", "localhost/trainyard-test:1"),
    ("docker://python:3.12", "docker://docker.io/library/python:3.12"),
    ("docker-archive:/srv/img.tar", "docker-archive:/srv/img.tar"),  # an admin's pull of an archive
])
def test_a_short_image_name_is_qualified_the_way_docker_does(short: str, full: str) -> None:
    assert qualified_image(short) == full
    assert qualified_image(full) == full


@pytest.mark.parametrize(
    ("text", "path"),
    [
        ("name: x\nimage: '--privileged'\ntaskRoles: {m: {commands: [run]}}", "image"),
        ("name: x\ntaskRoles: {m: {image: 'a b', commands: [run]}}", "taskRoles.m.image"),
        ("name: x\nprerequisites: [{name: t, type: dockerimage, uri: '-v /:/host'}]\n"
         "taskRoles: {m: {dockerImage: t, commands: [run]}}", "prerequisites[0].uri"),
        ("name: x\nprerequisites: [{name: t, type: dockerimage, uri: 'torch:2'}]\n"
         "taskRoles: {m: {image: 'torch:1', dockerImage: t, commands: [run]}}", "taskRoles.m.image"),
    ],
)
def test_an_image_that_is_no_image_reference_is_refused_at_its_field(text: str, path: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_job(text)
    assert path in [e.path for e in caught.value.errors]


@pytest.mark.parametrize("image", ["docker-archive:/var/lib/trainyard/work/c/alice/1/img.tar", "OCI-ARCHIVE:/x.tar",
                                   "containers-storage:python:3.12", "dir:/home/alice/img"])
def test_a_jobs_image_from_a_local_file_or_store_is_refused_it_comes_from_a_registry(image: str) -> None:
    # Root's engine would load whatever archive the path names on the node: another user's file too.
    for text, path in ((f"name: x\nimage: '{image}'\ntaskRoles: {{m: {{commands: [run]}}}}", "image"),
                       (f"name: x\nprerequisites: [{{name: t, type: dockerimage, uri: '{image}'}}]\n"
                        "taskRoles: {m: {dockerImage: t, commands: [run]}}", "prerequisites[0].uri")):
        with pytest.raises(SpecError) as caught:
            parse_job(text)
        (error,) = [e for e in caught.value.errors if e.path == path]
        assert "transport" in error.message and "registry" in error.message
    # A registry with a port, or docker:// (a registry too), is an image reference as before.
    for fine in ("registry.example.com:5000/team/train:v2", "docker://python:3.12", "localhost/dir:1"):
        assert parse_job(f"name: x\nimage: '{fine}'\ntaskRoles: {{m: {{commands: [run]}}}}").image == fine
