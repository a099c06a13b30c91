"""The hostile-input corpus, parsed directly: every entry is refused at the field it names."""

from __future__ import annotations

import pytest
from e2e.hostile_corpus import CORPUS, Hostile

from trainyard.spec.errors import SpecError
from trainyard.spec.loading import parse_job
from trainyard.spec.nesting import MAX_DEPTH


@pytest.mark.parametrize("case", [c for c in CORPUS if c.status == 422], ids=lambda c: c.name)
def test_each_hostile_job_file_is_refused_at_its_field(case: Hostile) -> None:
    with pytest.raises(SpecError) as refused:
        parse_job(case.body, content_type=case.content_type)
    assert refused.value.errors[0].path.startswith(case.path), str(refused.value)


def nested(depth: int, fmt: str) -> str:
    inner = "[" * depth + "1" + "]" * depth
    if fmt == "json":
        return '{"name": "x", "taskRoles": {"m": {"commands": ["true"]}}, "parameters": {"p": ' + inner + "}}"
    return "name: x\ntaskRoles: {m: {commands: ['true']}}\nparameters: {p: " + inner + "}\n"


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_nesting_is_allowed_up_to_the_documented_depth_and_no_further(fmt: str) -> None:
    # parameters (1) + p (2) + the lists: the document's depth counts every container.
    assert parse_job(nested(MAX_DEPTH - 2, fmt), content_type=fmt).parameters["p"]
    with pytest.raises(SpecError, match=f"nested more than {MAX_DEPTH} levels deep"):
        parse_job(nested(MAX_DEPTH - 1, fmt), content_type=fmt)


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    text = '{"name": "x", "taskRoles": {"m": {"commands": ["echo ' + "[{" * 100 + '"]}}}'
    assert parse_job(text, content_type="json").taskRoles["m"].commands == ["echo " + "[{" * 100]
    assert parse_job("name: x\ntaskRoles: {m: {commands: ['echo " + "[{" * 100 + "']}}\n").name == "x"


def test_an_env_value_just_under_the_kernel_limit_is_accepted() -> None:
    value = "a" * (128 * 1024 - len("BIG=") - 1)
    spec = parse_job("name: x\ntaskRoles:\n  m:\n    commands: ['true']\n    env: {BIG: " + value + "}\n")
    assert spec.taskRoles["m"].env["BIG"] == value
