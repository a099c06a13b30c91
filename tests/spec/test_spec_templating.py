"""Placeholders in commands and environment values, and the masked and normalized views."""

from __future__ import annotations

import json
from typing import Any

import pytest

from trainyard.spec.loading import parse_job, validate_job
from trainyard.spec.templating import (
    MASK,
    TemplateError,
    masked_spec,
    normalized_spec,
    render,
    render_role,
)

PARAMETERS: dict[str, Any] = {
    "lr": 0.001,
    "epochs": 10,
    "amp": True,
    "model": "resnet50",
    "optim": {"name": "adam", "betas": [0.9, 0.999]},
    "data.root": "/datasets",
    "nothing": None,
}
SECRETS: dict[str, Any] = {"wandb": "wb-key-123", "db": {"password": "hunter2-db"}}


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("--lr <% $parameters.lr %>", "--lr 0.001"),
        ("--epochs=<%$parameters.epochs%>", "--epochs=10"),
        ("--amp <% $parameters.amp %>", "--amp true"),
        ("<% $parameters.model %>-<% $parameters.model %>", "resnet50-resnet50"),
        ("--optim <% $parameters.optim.name %>", "--optim adam"),
        ("--beta2 <% $parameters.optim.betas[1] %>", "--beta2 0.999"),
        ("--root <% $parameters.data.root %>", "--root /datasets"),
        ("[<% $parameters.nothing %>]", "[]"),
        ("<% $parameters.optim %>", '{"betas":[0.9,0.999],"name":"adam"}'),
        ("no placeholders at all", "no placeholders at all"),
        ("login <% $secrets.wandb %>", "login wb-key-123"),
        ("PGPASSWORD=<% $secrets.db.password %>", "PGPASSWORD=hunter2-db"),
    ],
)
def test_placeholders_are_replaced_by_parameter_and_secret_values(
    template: str, expected: str
) -> None:
    assert render(template, PARAMETERS, SECRETS) == expected


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("<% $parameters.batch %>", "unknown parameter 'batch'"),
        ("<% $parameters.optim.momentum %>", "unknown parameter 'optim.momentum'"),
        ("<% $parameters.optim.betas[5] %>", "unknown parameter 'optim.betas.5'"),
        ("<% $secrets.db.user %>", "unknown secret 'db.user'"),
        ("<% $parameters %>", "'$parameters' must name a parameter"),
        ("<% $env.HOME %>", "unknown reference '$env'"),
        ("<% $parameters.lr", "unclosed placeholder"),
    ],
)
def test_a_placeholder_that_does_not_resolve_raises_a_template_error(
    template: str, message: str
) -> None:
    with pytest.raises(TemplateError, match=message.replace("[", r"\[").replace("$", r"\$")):
        render(template, PARAMETERS, SECRETS)


def test_a_template_error_is_a_value_error() -> None:
    assert issubclass(TemplateError, ValueError)


def job(**extra: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "name": "templated",
        "parameters": PARAMETERS,
        "secrets": SECRETS,
        "taskRoles": {
            "train": {
                "commands": [
                    "wandb login <% $secrets.wandb %>",
                    "python train.py --lr <% $parameters.lr %> --opt <% $parameters.optim.name %>",
                ],
                "env": {
                    "EPOCHS": "<% $parameters.epochs %>",
                    "DB_PASSWORD": "<% $secrets.db.password %>",
                    "PLAIN": 7,
                },
            }
        },
    }
    document.update(extra)
    return document


def test_render_role_gives_the_commands_and_environment_a_task_runs_with() -> None:
    commands, env = render_role(validate_job(job()), "train")

    assert commands == ["wandb login wb-key-123", "python train.py --lr 0.001 --opt adam"]
    assert env == {"EPOCHS": "10", "DB_PASSWORD": "hunter2-db", "PLAIN": "7"}


def test_render_role_for_an_unknown_role_raises_key_error() -> None:
    with pytest.raises(KeyError, match="no task role named 'eval'"):
        render_role(validate_job(job()), "eval")


def test_the_masked_spec_hides_every_secret_and_keeps_parameters() -> None:
    spec = validate_job(job())

    masked = masked_spec(spec)

    assert masked["secrets"] == {"wandb": MASK, "db": {"password": MASK}}
    assert masked["parameters"] == PARAMETERS
    text = json.dumps(masked)
    assert "wb-key-123" not in text and "hunter2-db" not in text
    # The placeholders themselves are not secret and stay readable.
    assert masked["taskRoles"]["train"]["commands"][0] == "wandb login <% $secrets.wandb %>"


def test_a_secret_pasted_into_a_command_is_masked_there_too() -> None:
    document = job()
    document["taskRoles"]["train"]["commands"].append("curl -H 'token: wb-key-123' example.org")
    document["description"] = "uses hunter2-db"

    masked = masked_spec(validate_job(document))

    assert masked["taskRoles"]["train"]["commands"][-1] == f"curl -H 'token: {MASK}' example.org"
    assert masked["description"] == f"uses {MASK}"


def test_masking_leaves_the_spec_itself_untouched() -> None:
    spec = validate_job(job())

    masked_spec(spec)

    assert spec.secrets == SECRETS
    assert normalized_spec(spec)["secrets"] == SECRETS


def test_secrets_nested_in_lists_are_masked_leaf_by_leaf() -> None:
    secrets = {**SECRETS, "keys": ["k-one", {"inner": 12345}]}

    masked = masked_spec(validate_job(job(secrets=secrets)))

    assert masked["secrets"]["keys"] == [MASK, {"inner": MASK}]


def test_the_normalized_spec_fills_in_defaults_and_includes_secrets() -> None:
    normalized = normalized_spec(validate_job(job()))

    assert normalized["secrets"] == SECRETS
    assert normalized["protocolVersion"] == 2
    assert normalized["defaults"] == {"virtualCluster": "default"}
    assert normalized["taskRoles"]["train"]["resourcePerInstance"] == {
        "gpu": 0,
        "cpu": 1,
        "memoryMB": 1024,
        "ports": {},
    }
    assert normalized["taskRoles"]["train"]["completion"] == {
        "minFailedInstances": 1,
        "minSucceededInstances": -1,
    }
    assert json.loads(json.dumps(normalized)) == normalized


def test_normalization_is_idempotent_for_a_minimal_job() -> None:
    first = normalized_spec(parse_job("name: x\ntaskRoles: {main: {commands: [run]}}"))

    assert normalized_spec(validate_job(first)) == first


def test_normalization_is_idempotent_for_the_full_openpai_job(openpai_text: str) -> None:
    first = normalized_spec(parse_job(openpai_text))

    again = normalized_spec(validate_job(first))

    assert again == first
    assert validate_job(again) == validate_job(first)
