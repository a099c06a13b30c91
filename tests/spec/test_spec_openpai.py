"""An OpenPAI protocol v2 job file is accepted as-is and keeps its meaning."""

from __future__ import annotations

import json
from typing import Any

from trainyard.spec.loading import container_fields, ignored_extras, parse_job
from trainyard.spec.models import JobSpec, Priority
from trainyard.spec.templating import normalized_spec, render_role


def assert_kept(original: Any, kept: Any, path: str = "") -> None:
    """Everything in ``original`` is in ``kept`` with the same value (kept may add defaults)."""
    if isinstance(original, dict):
        assert isinstance(kept, dict), path
        for key, value in original.items():
            assert key in kept, f"{path}.{key} was dropped"
            assert_kept(value, kept[key], f"{path}.{key}")
    elif isinstance(original, list):
        assert isinstance(kept, list) and len(kept) == len(original), path
        for index, (left, right) in enumerate(zip(original, kept, strict=True)):
            assert_kept(left, right, f"{path}[{index}]")
    else:
        assert kept == original and type(kept) is type(original), (
            f"{path}: {kept!r} != {original!r}"
        )


def test_a_full_openpai_v2_job_file_is_accepted_as_is(openpai_text: str) -> None:
    spec = parse_job(openpai_text)

    assert isinstance(spec, JobSpec)
    assert spec.name == "tensorflow_cifar10"
    assert spec.role_names == ["worker", "ps_server"]
    assert spec.task_count == 3
    assert spec.jobRetryCount == 1
    assert spec.defaults.virtualCluster == "vc1"
    assert spec.priority is Priority.NORMAL
    worker = spec.taskRoles["worker"]
    assert worker.resourcePerInstance.gpu == 4
    assert worker.resourcePerInstance.ports == {"ssh": 1, "http": 1}
    assert worker.completion.minSucceededInstances == 1
    assert worker.dockerImage == "tf_example"
    assert worker.extraContainerOptions == {"shmMB": 64}


def test_every_field_of_the_openpai_file_is_kept_in_the_normalized_spec(
    openpai_text: str, openpai_document: dict[str, Any]
) -> None:
    normalized = normalized_spec(parse_job(openpai_text))

    # The only rewrite: OpenPAI's null "no early success" is stored as its synonym -1.
    completion = openpai_document["taskRoles"]["ps_server"]["completion"]
    assert completion["minSucceededInstances"] is None
    completion["minSucceededInstances"] = -1
    assert_kept(openpai_document, normalized)


def test_extras_are_kept_verbatim_including_runtime_plugins(openpai_text: str) -> None:
    spec = parse_job(openpai_text)

    plugins = spec.extras["com.microsoft.pai.runtimeplugin"]
    assert plugins[0] == {"plugin": "ssh", "parameters": {"jobssh": True}}
    assert plugins[1]["parameters"]["storageConfigNames"] == ["confignfs"]
    assert spec.extras["hivedScheduler"]["taskRoles"]["worker"]["skuType"] == "DT"


def test_completion_defaults_are_openpai_defaults_and_null_means_minus_one(
    openpai_text: str,
) -> None:
    spec = parse_job(openpai_text)
    minimal = parse_job("name: x\ntaskRoles: {main: {commands: [run]}}")

    assert spec.taskRoles["ps_server"].completion.minFailedInstances == 1
    assert spec.taskRoles["ps_server"].completion.minSucceededInstances == -1
    assert minimal.taskRoles["main"].completion.minFailedInstances == 1
    assert minimal.taskRoles["main"].completion.minSucceededInstances == -1


def test_minus_one_and_null_both_turn_off_failing_the_job_on_task_failure() -> None:
    for value in ("-1", "null"):
        text = (
            "name: x\ntaskRoles:\n  main:\n    instances: 3\n"
            f"    completion: {{minFailedInstances: {value}}}\n    commands: [run]\n"
        )
        assert parse_job(text).taskRoles["main"].completion.minFailedInstances == -1


def test_the_deployment_named_in_defaults_wraps_the_role_commands(openpai_text: str) -> None:
    spec = parse_job(openpai_text)

    worker_commands, _ = render_role(spec, "worker")
    ps_commands, _ = render_role(spec, "ps_server")

    assert worker_commands[0] == (
        "wget https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz -P data_cifar10"
    )
    assert (
        "https://MaggieQi:ghp_cGFzc3dvcmQtdG9rZW4@github.com/MaggieQi/benchmarks"
        in (worker_commands[1])
    )
    assert worker_commands[2] == "cd script_tensorflow_cnnbenchmarks/scripts/tf_cnn_benchmarks"
    assert "--model=resnet20 --batch_size=32" in worker_commands[3]
    assert "--optimizer=momentum --learning_rate=0.1" in worker_commands[3]
    assert ps_commands[-1] == (
        "hdfs dfs -cp output_tensorflow_cifar10_model hdfs://10.151.40.179:9000/core/cifar10_model"
    )


def test_extra_container_options_are_listed_as_kept_but_unused(openpai_text: str) -> None:
    spec = parse_job(openpai_text)

    assert container_fields(spec) == [
        "taskRoles.worker.extraContainerOptions",
        "taskRoles.ps_server.extraContainerOptions",
    ]


def test_a_roles_docker_image_is_its_prerequisites_uri(openpai_text: str) -> None:
    spec = parse_job(openpai_text)

    # A Docker Hub short name, written in full as Docker reads it (Podman refuses it otherwise).
    assert spec.role_image("worker") == "docker.io/openpai/pai.example.tensorflow:latest"
    assert spec.role_image("ps_server") == "docker.io/openpai/pai.example.tensorflow:latest"


def test_openpai_runtime_plugins_are_named_as_ignored_except_teamwise_storage(openpai_text: str) -> None:
    """Issue 13: `ssh` was silently ignored. Issue 17: `teamwise_storage` is acted on (its
    storages are mounted), so it is no longer named."""
    assert ignored_extras(parse_job(openpai_text)) == [
        "extras.com.microsoft.pai.runtimeplugin[0] (ssh): kept, but ignored: Trainyard runs no OpenPAI runtime plugins",
    ]
    assert ignored_extras(parse_job("name: x\nextras: {hivedScheduler: {}}\ntaskRoles: {m: {commands: [run]}}")) == []
    assert ignored_extras(parse_job("name: x\nextras: [1]\ntaskRoles: {m: {commands: [run]}}")) == []


def test_a_job_without_container_fields_lists_none() -> None:
    spec = parse_job("name: x\ntaskRoles: {main: {commands: [run]}}")

    assert container_fields(spec) == []


def test_the_openpai_file_as_json_gives_the_same_spec(
    openpai_text: str, openpai_document: dict[str, Any]
) -> None:
    from_yaml = parse_job(openpai_text)
    from_json = parse_job(json.dumps(openpai_document), content_type="json")

    assert from_json == from_yaml
