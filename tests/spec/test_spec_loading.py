"""Reading job files: YAML and JSON text, bytes, and every way the text itself can be wrong."""

from __future__ import annotations

import json

import pytest

from trainyard.spec.errors import FieldError, SpecError
from trainyard.spec.loading import parse_job

MINIMAL = "name: hello\ntaskRoles:\n  main:\n    commands: [echo hi]\n"


def errors_of(text: str | bytes, content_type: str | None = "yaml") -> list[FieldError]:
    with pytest.raises(SpecError) as caught:
        parse_job(text, content_type=content_type)
    return caught.value.errors


def test_a_minimal_yaml_job_is_parsed() -> None:
    spec = parse_job(MINIMAL)

    assert spec.name == "hello"
    assert spec.taskRoles["main"].commands == ["echo hi"]


@pytest.mark.parametrize(
    "content_type",
    [
        None,
        "yaml",
        "YAML",
        "application/yaml",
        "application/x-yaml",
        "text/yaml; charset=utf-8",
        "text/plain",
    ],
)
def test_yaml_is_read_under_every_usual_content_type(content_type: str | None) -> None:
    assert parse_job(MINIMAL, content_type=content_type).name == "hello"


@pytest.mark.parametrize("content_type", ["json", "application/json", "application/vnd.x+json"])
def test_json_is_read_under_every_usual_content_type(content_type: str) -> None:
    text = json.dumps({"name": "hello", "taskRoles": {"main": {"commands": ["echo hi"]}}})

    assert parse_job(text, content_type=content_type).name == "hello"


def test_bytes_are_read_as_utf8_with_or_without_a_byte_order_mark() -> None:
    assert parse_job(MINIMAL.encode()).name == "hello"
    assert parse_job(b"\xef\xbb\xbf" + MINIMAL.encode()).name == "hello"


def test_bytes_that_are_not_utf8_are_rejected() -> None:
    assert errors_of(b"name: \xff\xfe\n") == [
        FieldError("<document>", "the job file is not UTF-8 text (bad byte at offset 6)")
    ]


def test_malformed_yaml_is_reported_with_its_line_and_column() -> None:
    text = "name: hello\ntaskRoles:\n  main:\n    commands: [echo hi\n  other: 1\n"

    (error,) = errors_of(text)

    assert error.path == "<line 5, column 8>"
    assert "expected ',' or ']'" in error.message


def test_a_bad_indent_is_reported_on_its_line() -> None:
    text = "name: hello\ntaskRoles:\n  main:\n    commands:\n      - a\n   instances: 2\n"

    (error,) = errors_of(text)

    assert error.path.startswith("<line 6, column ")
    assert error.message


def test_malformed_json_is_reported_with_its_line_and_column() -> None:
    text = '{\n  "name": "hello",\n  "taskRoles": {\n}'

    assert errors_of(text, content_type="json") == [
        FieldError("<line 4, column 2>", "Expecting ',' delimiter")
    ]


def test_a_key_given_twice_in_yaml_is_rejected_with_both_lines() -> None:
    text = "name: hello\ntaskRoles:\n  main:\n    commands: [a]\n  main:\n    commands: [b]\n"

    assert errors_of(text) == [
        FieldError(
            "<line 5, column 3>",
            "duplicate key 'main' (first given on line 3) (while reading a mapping)",
        )
    ]


def test_a_key_given_twice_in_json_is_rejected() -> None:
    text = '{"name": "a", "name": "b", "taskRoles": {}}'

    assert errors_of(text, content_type="json") == [
        FieldError("<document>", "duplicate key 'name'")
    ]


def test_yaml_merge_keys_may_be_overridden_without_counting_as_duplicates() -> None:
    text = (
        "name: hello\n"
        "taskRoles:\n"
        "  base: &base {instances: 2, commands: [run]}\n"
        "  other:\n"
        "    <<: *base\n"
        "    instances: 3\n"
    )

    spec = parse_job(text)

    assert spec.taskRoles["other"].instances == 3
    assert spec.taskRoles["other"].commands == ["run"]


@pytest.mark.parametrize("text", ["", "   \n\n", "# only a comment\n", "---\n", "null\n"])
def test_an_empty_document_is_rejected_clearly(text: str) -> None:
    assert errors_of(text) == [
        FieldError("<document>", "the job file is empty; it needs at least name and taskRoles")
    ]


@pytest.mark.parametrize(
    ("text", "got"), [("- a\n- b\n", "a list"), ("just words\n", "'just words'"), ("42\n", "42")]
)
def test_a_document_that_is_not_a_mapping_is_rejected_clearly(text: str, got: str) -> None:
    assert errors_of(text) == [
        FieldError(
            "<document>",
            f"the job file must be a mapping of fields such as name and taskRoles (got {got})",
        )
    ]


def test_two_yaml_documents_in_one_file_are_rejected() -> None:
    (error,) = errors_of(MINIMAL + "---\n" + MINIMAL)

    assert error.path == "<line 5, column 1>"
    assert "expected a single document" in error.message


def test_an_unsupported_content_type_is_rejected() -> None:
    assert errors_of(MINIMAL, content_type="application/x-www-form-urlencoded") == [
        FieldError(
            "<document>",
            "unsupported content type 'application/x-www-form-urlencoded'; "
            "send the job file as YAML or JSON",
        )
    ]


def test_field_errors_in_a_yaml_file_carry_field_paths() -> None:
    text = "name: hello\ntaskRoles:\n  main:\n    instancez: 2\n    commands: [run]\n"

    assert errors_of(text) == [
        FieldError("taskRoles.main.instancez", "unknown field; did you mean 'instances'?")
    ]


def test_a_non_string_mapping_key_is_reported() -> None:
    text = "name: hello\nparameters:\n  1: one\ntaskRoles:\n  main:\n    commands: [run]\n"

    assert errors_of(text) == [FieldError("parameters", "keys must be strings (got 1)")]


def test_the_spec_error_prints_one_problem_per_line() -> None:
    with pytest.raises(SpecError) as caught:
        parse_job("name: a b\ntaskRoles:\n  w:\n    instances: 0\n    commands: [run]\n")

    assert str(caught.value) == (
        "name: may contain only letters, digits, '_' and '-' (got 'a b')\n"
        "taskRoles.w.instances: must be ≥ 1 (got 0)"
    )


def test_alias_bombs_binary_values_and_nul_characters_are_refused() -> None:
    levels = ["a: &a [x,x,x,x,x,x,x,x,x,x]"] + [
        f"{n}: &{n} [{', '.join(['*' + p] * 10)}]" for p, n in zip("abcd", "bcde")
    ]
    bomb = "\n".join(levels) + "\nname: x\ntaskRoles: {m: {commands: [a]}}\n"
    with pytest.raises(SpecError, match="too large once expanded"):
        parse_job(bomb)
    with pytest.raises(SpecError, match="binary data is not allowed"):
        parse_job("name: x\ndescription: !!binary aGVsbG8=\ntaskRoles: {m: {commands: [a]}}\n")
    with pytest.raises(SpecError, match="NUL"):
        parse_job('{"name": "x", "taskRoles": {"m": {"commands": ["a\\u0000"]}}}', content_type="json")
    with pytest.raises(SpecError, match="nested more than 32 levels deep"):
        parse_job("[" * 5000, content_type="json")


def test_unquoted_dates_become_text() -> None:
    assert parse_job("name: x\ndescription: 2024-01-01\ntaskRoles: {m: {commands: [a]}}\n").description == "2024-01-01"


def test_role_names_with_a_trailing_newline_and_too_many_ports_are_refused() -> None:
    with pytest.raises(SpecError, match="task role names"):
        parse_job('{"name": "x", "taskRoles": {"bad\\n": {"commands": ["a"]}}}', content_type="json")
    with pytest.raises(SpecError, match="ports.p: must be ≤ 64"):
        parse_job("name: x\ntaskRoles: {m: {commands: [a], resourcePerInstance: {ports: {p: 25000}}}}\n")
    with pytest.raises(SpecError, match="at most 64 ports per instance"):
        parse_job("name: x\ntaskRoles: {m: {commands: [a], resourcePerInstance: {ports: {p: 40, q: 40}}}}\n")
