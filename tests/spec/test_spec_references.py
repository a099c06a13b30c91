"""Prerequisites, deployments and placeholders: references that must resolve, at their paths."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from spec_mutations import Mutation, W, errors_of, setting

from trainyard.spec.errors import FieldError

CASES: list[tuple[str, Mutation, str, str]] = [
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
        setting(
            "deployments", value=[{"name": "prod", "taskRoles": {"ps": {"preCommands": ["x"]}}}]
        ),
        "deployments[0].taskRoles.ps",
        "no task role named 'ps' (task roles: worker)",
    ),
    (
        "a data selection naming no prerequisite is reported once, at the selection",
        lambda d: (
            setting(*W, "commands", value=["ls <% $data.uri[0] %>"])(d)
            or setting(*W, "data", value="cifar")(d)
        ),
        "taskRoles.worker.data",
        "no data prerequisite named 'cifar'; declare it under prerequisites "
        "(- name: cifar, type: data, uri: …)",
    ),
    (
        "a registry password may use secrets only",
        setting(
            "prerequisites",
            value=[
                {
                    "name": "img",
                    "type": "dockerimage",
                    "uri": "x",
                    "auth": {"password": "<% $parameters.pw %>"},
                }
            ],
        ),
        "prerequisites[0].auth.password",
        "only $secrets may be used here (got '<% $parameters.pw %>')",
    ),
    (
        "a registry password using an unknown secret is rejected there",
        setting(
            "prerequisites",
            value=[
                {
                    "name": "img",
                    "type": "dockerimage",
                    "uri": "x",
                    "auth": {"password": "<% $secrets.registry %>"},
                }
            ],
        ),
        "prerequisites[0].auth.password",
        "unknown secret 'registry'",
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
        lambda d: (
            d.update(parameters={"optim": {"lr": 0.1}}),
            setting(*W, "commands", value=["x <% $parameters.optim.beta %>"])(d),
        ),
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
