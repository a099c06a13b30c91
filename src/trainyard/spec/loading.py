"""Reading a job file (YAML or JSON text) into a validated `JobSpec`, or a `SpecError`."""

from __future__ import annotations

import json
from typing import Any

import yaml
from pydantic import ValidationError

from trainyard.spec.errors import DOCUMENT, FieldError, SpecError, show
from trainyard.spec.models import JobSpec
from trainyard.spec.nesting import check_json_depth, check_yaml_depth
from trainyard.spec.plaindata import OversizedNumber, plain_data
from trainyard.spec.storages import RUNTIME_PLUGINS, TEAMWISE_STORAGE
from trainyard.spec.translate import spec_error_from

_MERGE_TAG = "tag:yaml.org,2002:merge"


# libyaml's parser when PyYAML was built with it (about 10x faster); same constructors.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BOOL_TAG, _STR_TAG = "tag:yaml.org,2002:bool", "tag:yaml.org,2002:str"
_WORD_KEYS = ("on", "off", "yes", "no")


class _JobFileLoader(_SafeLoader):  # type: ignore[misc, valid-type]
    """PyYAML's safe loader, except that a key given twice in one mapping is an error.

    Plain PyYAML keeps the last value silently, which turns a pasted-twice task role
    into a quietly different job.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            # YAML 1.1 reads a plain `on:` (off, yes, no) as a boolean: as a key it is the word
            # (``notify: {on: [failed]}``), as GitHub Actions reads its own `on:`.
            if (isinstance(key_node, yaml.ScalarNode) and key_node.tag == _BOOL_TAG and not key_node.style
                    and key_node.value.lower() in _WORD_KEYS):
                key_node.tag = _STR_TAG
            if key_node.tag == _MERGE_TAG or not isinstance(key_node, yaml.ScalarNode):
                continue  # keys merged in with `<<:` may legitimately be overridden
            key = self.construct_object(key_node, deep=True)
            if key in first_line:
                raise yaml.constructor.ConstructorError(
                    "while reading a mapping",
                    node.start_mark,
                    f"duplicate key {key!r} (first given on line {first_line[key] + 1})",
                    key_node.start_mark,
                )
            first_line[key] = key_node.start_mark.line
        # The base class is chosen at run time, so untyped here; the stub's type for both.
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int | OversizedNumber:
        try:
            number: int = super().construct_yaml_int(node)
            return number
        except ValueError:  # Python converts at most 4,300 decimal digits
            return OversizedNumber(sum(c.isdigit() for c in node.value))


_JobFileLoader.add_constructor("tag:yaml.org,2002:int", _JobFileLoader.construct_yaml_int)


def _json_int(text: str) -> int | OversizedNumber:
    try:
        return int(text)
    except ValueError:  # Python converts at most 4,300 decimal digits
        return OversizedNumber(len(text.lstrip("-")))


def parse_job(text: str | bytes, *, content_type: str | None = "yaml") -> JobSpec:
    """Parse and validate a job file.

    ``content_type`` is ``"yaml"`` (default; also used for ``None``), ``"json"``, or a
    media type such as ``application/json`` or ``application/yaml``. Every problem —
    unreadable text, bad syntax, invalid fields — is raised as a SpecError.
    """
    return validate_job(load_document(text, content_type=content_type))


def load_document(text: str | bytes, *, content_type: str | None = "yaml") -> Any:
    """The job file's text as data, not yet validated (``parse_job`` less the validation),
    for a caller that changes the document first; raises SpecError as ``parse_job`` does."""
    data = _load(_decode(text), _format(content_type))
    if data is None:
        raise SpecError.single(
            DOCUMENT, "the job file is empty; it needs at least name and taskRoles"
        )
    return data


def validate_job(data: dict[str, Any]) -> JobSpec:
    """Validate an already parsed job document; raises SpecError listing every problem."""
    if not isinstance(data, dict):
        raise SpecError.single(
            DOCUMENT,
            "the job file must be a mapping of fields such as name and taskRoles "
            f"(got {show(data)})",
        )
    if not data:
        raise SpecError.single(
            DOCUMENT, "the job file is empty; it needs at least name and taskRoles"
        )
    data = plain_data(data)
    try:
        return JobSpec.model_validate(data)
    except ValidationError as error:
        raise spec_error_from(error, data) from None


def container_fields(spec: JobSpec) -> list[str]:
    """Paths of container fields that Trainyard keeps but does not act on: OpenPAI's
    ``extraContainerOptions`` (Trainyard sets a container's options itself). The image
    (``image``, ``dockerImage``) is honoured: the role's tasks run in containers."""
    return [
        f"taskRoles.{name}.extraContainerOptions"
        for name, role in spec.taskRoles.items()
        if role.extraContainerOptions
    ]


def ignored_extras(spec: JobSpec) -> list[str]:
    """Warnings for OpenPAI ``extras`` that Trainyard keeps but does not act on: each runtime
    plugin (``ssh``, ``tensorboard``, ...) is an OpenPAI container hook, and no backend of
    Trainyard's runs them, so a job that relies on one is told so. ``teamwise_storage`` is
    the exception: Trainyard mounts the storages it names itself (``spec/storages.py``)."""
    extras = spec.extras if isinstance(spec.extras, dict) else {}
    plugins = extras.get(RUNTIME_PLUGINS)
    if plugins is None:
        return []
    path = f"extras.{RUNTIME_PLUGINS}"
    if not isinstance(plugins, list):
        return [f"{path}: kept, but ignored: Trainyard runs no OpenPAI runtime plugins"]
    warnings = []
    for index, plugin in enumerate(plugins):
        name = plugin.get("plugin") if isinstance(plugin, dict) else None
        if name == TEAMWISE_STORAGE:
            continue
        named = f" ({name})" if isinstance(name, str) and name else ""
        warnings.append(f"{path}[{index}]{named}: kept, but ignored: Trainyard runs no OpenPAI runtime plugins")
    return warnings


def _format(content_type: str | None) -> str:
    if content_type is None:
        return "yaml"
    media = content_type.split(";", 1)[0].strip().lower()
    if media == "json" or media.endswith("/json") or media.endswith("+json"):
        return "json"
    if media in ("", "yaml", "yml", "text/plain") or media.endswith(("/yaml", "/x-yaml", "+yaml")):
        return "yaml"
    raise SpecError.single(
        DOCUMENT, f"unsupported content type {content_type!r}; send the job file as YAML or JSON"
    )


def _decode(text: str | bytes) -> str:
    if isinstance(text, str):
        return text
    try:
        return text.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise SpecError.single(
            DOCUMENT, f"the job file is not UTF-8 text (bad byte at offset {error.start})"
        ) from None


def _load(text: str, fmt: str) -> Any:
    if not text.strip():
        return None
    if fmt == "json":
        check_json_depth(text)
        return _load_json(text)
    check_yaml_depth(text)
    try:
        return yaml.load(text, Loader=_JobFileLoader)
    except RecursionError:
        raise SpecError.single(DOCUMENT, "the job file is nested too deeply") from None
    except yaml.MarkedYAMLError as error:
        raise SpecError([_yaml_problem(error)]) from None
    except yaml.YAMLError as error:
        raise SpecError.single(DOCUMENT, f"not valid YAML: {error}") from None


def _yaml_problem(error: yaml.MarkedYAMLError) -> FieldError:
    mark = error.problem_mark or error.context_mark
    problem = error.problem or error.context or "not valid YAML"
    if error.context and error.problem:
        problem = f"{problem} ({error.context})"
    if mark is None:
        return FieldError(DOCUMENT, problem)
    return FieldError(f"<line {mark.line + 1}, column {mark.column + 1}>", problem)


def _load_json(text: str) -> Any:
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value in pairs:
            if key in result:
                raise _DuplicateKey(key)
            result[key] = value
        return result

    try:
        return json.loads(text, object_pairs_hook=no_duplicates, parse_int=_json_int)
    except RecursionError:
        raise SpecError.single(DOCUMENT, "the job file is nested too deeply") from None
    except json.JSONDecodeError as error:
        where = f"<line {error.lineno}, column {error.colno}>"
        raise SpecError.single(where, error.msg) from None
    except _DuplicateKey as error:
        raise SpecError.single(DOCUMENT, f"duplicate key {error.key!r}") from None


class _DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key
