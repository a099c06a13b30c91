"""A task role's resource expression is checked with the job file: refused at its field path."""

from __future__ import annotations

import pytest

from trainyard.spec.errors import SpecError
from trainyard.spec.loading import parse_job

PATH = "taskRoles.worker.resourcePerInstance.selector"


def job_file(selector: str, gpu: int = 1) -> str:
    return (
        "name: sel\n"
        "taskRoles:\n"
        "  worker:\n"
        "    commands: [hostname]\n"
        "    resourcePerInstance:\n"
        f"      gpu: {gpu}\n"
        f"      selector: {selector}\n"
    )


def errors(text: str) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as caught:
        parse_job(text)
    return [(e.path, e.message) for e in caught.value.errors]


def test_an_accepted_expression_is_kept_as_written() -> None:
    source = 'gpu.memoryMB >= 40000 && gpu.model in ["A100", "H100"] && node.labels["ib"] == "true"'
    spec = parse_job(job_file(f"'{source}'"))
    assert spec.taskRoles["worker"].resourcePerInstance.selector == source


def test_a_syntax_error_is_refused_at_the_field_with_its_position() -> None:
    [(path, message)] = errors(job_file("'gpu.memoryMB >= && 3'"))
    assert path == PATH
    assert message.startswith("syntax error: unexpected '&&' at line 1, column 17\n")
    assert message.endswith("\n                  ^")


def test_an_unknown_attribute_and_a_wrong_type_are_refused_at_submit() -> None:
    [(path, message)] = errors(job_file("'gpu.memroyMB >= 40000'"))
    assert path == PATH and "unknown attribute gpu.memroyMB" in message
    [(path, message)] = errors(job_file("'gpu.memoryMB >= \"40000\"'"))
    assert path == PATH and "wrong types" in message


def test_a_role_without_gpus_may_not_name_gpu() -> None:
    [(path, message)] = errors(job_file("'gpu.model == \"A100\"'", gpu=0))
    assert path == PATH and "sees only node, not gpu" in message


def test_a_selector_must_be_a_non_blank_string() -> None:
    [(path, _)] = errors(job_file("42"))
    assert path == PATH
    [(path, _)] = errors(job_file("'  '"))
    assert path == PATH
