"""What the most run commands show, read from the server's JSON as it came, without the API's
pydantic models: ``yard jobs``'s table, what ``yard submit`` says of the job it made, the
tasks ``yard logs`` names beside the one it showed, and (``read``) the answers ``yard job``
and a working directory's upload read whole. Importing pydantic and building the models
was the larger half of these commands' cost (issue 33). Only the fields shown are read, each
checked for its type and given the default ``schemas/jobs.py`` gives it; a state is read as
the model reads it (``JobState``). ``tests/cli/test_cli_plain.py`` holds what they show equal
to what the models give. Anything else (a field missing or of another type: another server,
another version) raises ValueError, and the caller reads the answer with the models, which
say what is wrong.

``read`` reads a whole answer by its model's JSON schema, generated from the model into
``cli/shapes.py`` (``python -m trainyard.cli.plain`` writes it again;
``tests/cli/test_cli_plain.py`` fails while it differs from the models'): each field checked
for its JSON type, a missing one given the model's default, a time read as a datetime, a
state as its enum. It accepts less than the models do (an id sent as "7", a number for a
time): what it does not accept raises ValueError, for the models to read."""

from __future__ import annotations

import importlib
import json
import math
import sys
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from trainyard.core import jobfile
from trainyard.core.states import AttemptState, JobState, TaskState

if TYPE_CHECKING:
    from trainyard.client import Client

ENUMS: dict[str, type] = {kind.__name__: kind for kind in (JobState, AttemptState, TaskState)}


class TaskView(SimpleNamespace):
    """A task as ``read`` gives it: ``schemas.jobs.TaskView``'s property too."""

    @property
    def label(self) -> str:
        """``ROLE/INDEX``, as ``--task`` and the log's task header name it."""
        return f"{self.role}/{self.index}"


class JobDetail(SimpleNamespace):
    """A job as ``read`` gives it: ``schemas.jobs.JobDetail``'s method too."""

    def task_labels(self) -> list[str]:
        """Every task of its job file and every task an attempt ran, ROLE/INDEX."""
        return jobfile.task_labels(self.spec, ((t.role, t.index) for a in self.attempts for t in a.tasks))


# The models whose classes add to their fields (a property), by name; the others read as a
# SimpleNamespace. tests/cli/test_cli_plain.py holds these to the models' own.
CLASSES: dict[str, type[SimpleNamespace]] = {"TaskView": TaskView, "JobDetail": JobDetail}


def job_page(answer: bytes) -> tuple[list[Any], int | None]:
    """The page's jobs, as rows ``render.jobs_table`` reads, and its ``next``; ValueError for
    an answer that is not what it expects."""
    try:
        page = json.loads(answer)
        items, following = page["items"], page["next"]
        if not isinstance(items, list) or not (following is None or _is(following, int)):
            raise ValueError("not a page of jobs")
        return [_summary(item) for item in items], following
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a page of jobs: {exc!r}") from exc


def submitted(answer: bytes) -> SimpleNamespace:
    """A submit's answer as ``yard submit`` says it: the job's id, name and state, and the
    server's warnings; ValueError for an answer that is not one."""
    try:
        made = json.loads(answer)
        warnings = made["warnings"]
        if not isinstance(warnings, list):
            raise ValueError("not a submit's warnings")
        return SimpleNamespace(id=_typed(made["id"], int), name=_typed(made["name"], str),
                               state=JobState(made["state"]), warnings=[_typed(w, str) for w in warnings])
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a submit's answer: {exc!r}") from exc


def task_labels(answer: bytes) -> list[str]:
    """A job's tasks, ROLE/INDEX: its job file's (its ``spec``, as the server shows it) and any
    other an attempt ran (an elastic role's grown workers); ValueError for an answer that is
    not a job."""
    try:
        job = json.loads(answer)
        roles = job["spec"].get("taskRoles") or {}
        ran = [(task["role"], int(task["index"])) for attempt in job.get("attempts") or [] for task in attempt["tasks"]]
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ValueError(f"not a job: {exc!r}") from exc
    if not isinstance(roles, dict) or not all(isinstance(role, dict) for role in roles.values()):
        raise ValueError("not a job's task roles")
    return jobfile.task_labels({"taskRoles": roles}, ran)


def read_or_parse(client: Client, model: str, answer: bytes, *, many: bool = False) -> Any:
    """The answer of ``model`` (``"jobs.JobDetail"``; ``many``: a list of them) read by
    ``read``, or, where it says ValueError, by the model itself (which says what is wrong)."""
    try:
        return read(model + ("[]" if many else ""), answer)
    except ValueError:
        module, _, name = model.rpartition(".")
        found: Any = getattr(importlib.import_module(f"trainyard.schemas.{module}"), name)
        return client._parse(list[found] if many else found, answer)


def read(model: str, answer: bytes) -> Any:
    """The answer of ``model`` (a name in ``cli/shapes.py``: ``"jobs.JobDetail"``, or
    ``"notices.JobNoticeView[]"`` for a list) as attributes, as the model would give them;
    ValueError for an answer that is not one."""
    from trainyard.cli.shapes import SHAPES

    schema = SHAPES[model]
    try:
        return _read(schema, json.loads(answer), schema.get("$defs", {}))
    except (KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise ValueError(f"not a {model}: {exc!r}") from exc


def _read(schema: dict[str, Any], value: Any, defs: dict[str, Any]) -> Any:
    """``value`` read by its JSON schema (the subset pydantic writes for the API's models)."""
    if "$ref" in schema:
        return _read(defs[schema["$ref"].rpartition("/")[2]], value, defs)
    if "anyOf" in schema:  # `X | None`: the first that fits, as pydantic reads JSON
        for option in schema["anyOf"]:
            try:
                return _read(option, value, defs)
            except ValueError:
                continue
        raise ValueError(f"{value!r} is none of {schema['anyOf']}")
    if "enum" in schema:
        if not isinstance(value, str) or value not in schema["enum"]:
            raise ValueError(f"{value!r} is not one of {schema['enum']}")
        return ENUMS[schema["title"]](value) if "title" in schema else value  # an enum's class; a Literal's text
    kind = schema.get("type")
    if kind == "object":
        if not isinstance(value, dict):
            raise ValueError(f"{value!r} is not an object")
        if "properties" in schema:
            return _fields(schema, value, defs)
        inner = schema.get("additionalProperties", True)
        return dict(value) if inner is True else {_typed(k, str): _read(inner, v, defs) for k, v in value.items()}
    if kind == "array":
        if not isinstance(value, list):
            raise ValueError(f"{value!r} is not a list")
        return [_read(schema["items"], item, defs) for item in value]
    if kind == "string" and schema.get("format") == "date-time":
        return _moment(value)
    if kind in SCALARS and "format" not in schema:
        found = _typed(value, SCALARS[kind])
        if kind == "number" and not math.isfinite(found):
            raise ValueError(f"{value!r} is not a finite number")
        return found
    if kind == "null" and value is None:
        return None
    if not schema:  # Any
        return value
    raise ValueError(f"{value!r} is not a {schema}")


SCALARS: dict[str, type] = {"string": str, "integer": int, "number": float, "boolean": bool}


def _fields(schema: dict[str, Any], value: dict[str, Any], defs: dict[str, Any]) -> SimpleNamespace:
    if schema.get("additionalProperties") is False and set(value) - set(schema["properties"]):
        raise ValueError(f"fields it does not know: {sorted(set(value) - set(schema['properties']))}")
    fields = {}
    for name, inner in schema["properties"].items():
        if name in value:
            fields[name] = _read(inner, value[name], defs)
        elif name in schema.get("required", ()) or "default" not in inner:
            raise ValueError(f"no {name!r}")
        else:  # the model's default, read as the model reads it (a copy of a list)
            fields[name] = _read(inner, inner["default"], defs)
    return CLASSES.get(schema.get("title", ""), SimpleNamespace)(**fields)


def _summary(item: dict[str, Any]) -> SimpleNamespace:
    pending = item.get("pending")
    return SimpleNamespace(
        id=_typed(item["id"], int), name=_typed(item["name"], str), user=_typed(item["user"], str),
        state=JobState(item["state"]), gpus=_typed(item["gpus"], float), attempt=_typed(item["attempt"], int),
        submittedAt=_moment(item["submittedAt"]), runtimeSeconds=_optional(item.get("runtimeSeconds"), float),
        message=_typed(item["message"], str), borrowed=_typed(item.get("borrowed", False), bool),
        pending=None if pending is None else SimpleNamespace(
            reason=_typed(pending["reason"], str), message=_typed(pending["message"], str),
            short=_typed(pending.get("short", ""), str), position=_optional(pending.get("position"), int)),
    )


def _is(value: object, kind: type) -> bool:
    if kind is float:  # JSON's numbers: an int is a float's value too, as pydantic reads it
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


def _typed(value: Any, kind: type) -> Any:
    if not _is(value, kind):
        raise ValueError(f"{value!r} is not a {kind.__name__}")
    return float(value) if kind is float else value


def _optional(value: Any, kind: type) -> Any:
    return None if value is None else _typed(value, kind)


def _moment(value: Any) -> datetime:
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a time")
    return datetime.fromisoformat(value)


# The answers `read` knows, as ("MODULE.NAME", a list of them) of `trainyard.schemas`.
READ_WHOLE = (("jobs.JobDetail", False), ("notices.JobNoticeView", True), ("usage.UsageReport", False),
              ("workdirs.WorkdirLimits", False), ("workdirs.WorkdirView", False))


def shapes_from_models() -> dict[str, Any]:
    """``cli/shapes.py``'s SHAPES as the models give them now: each one's JSON schema, its
    titles and descriptions left out but an enum's title (it names the enum's class)."""
    from pydantic import TypeAdapter

    def trimmed(schema: Any, *, in_defs: bool = False) -> Any:
        if isinstance(schema, list):
            return [trimmed(item) for item in schema]
        if not isinstance(schema, dict):
            return schema
        if "enum" in schema and in_defs and schema.get("title") not in ENUMS:
            raise ValueError(f"an enum cli/plain.py does not know: {schema.get('title')}")
        named = "properties" in schema or (in_defs and "enum" in schema)  # a model's or enum's title: its class
        return {key: (value if key in ("default", "enum") else
                      {name: trimmed(inner, in_defs=key == "$defs") for name, inner in value.items()}
                      if key in ("$defs", "properties") else trimmed(value))
                for key, value in schema.items() if key != "description" and (key != "title" or named)}

    shapes = {}
    for where, many in READ_WHOLE:
        module, _, name = where.rpartition(".")
        model: Any = getattr(importlib.import_module(f"trainyard.schemas.{module}"), name)
        shapes[where + ("[]" if many else "")] = trimmed(TypeAdapter(list[model] if many else model).json_schema())
    return shapes


def shapes_source() -> str:
    """``cli/shapes.py`` as ``python -m trainyard.cli.plain`` writes it."""
    return ('"""The JSON schemas of the answers ``cli/plain.py`` reads whole, generated from the API\'s models\n'
            'by ``python -m trainyard.cli.plain``: do not edit."""\n\nfrom typing import Any\n\n'
            f"SHAPES: dict[str, Any] = {_source(shapes_from_models(), 0)}\n")


def _source(value: Any, indent: int, lead: int = 0) -> str:
    """``value``'s repr, on one line where it fits (after ``lead`` characters), else one entry a line."""
    inline = repr(value)
    if indent + lead + len(inline) < 118 or not isinstance(value, dict | list):
        return inline
    pad = " " * (indent + 4)
    if isinstance(value, list):
        return "[\n" + "".join(f"{pad}{_source(item, indent + 4)},\n" for item in value) + " " * indent + "]"
    entries = (f"{pad}{key!r}: {_source(item, indent + 4, len(repr(key)) + 2)},\n" for key, item in value.items())
    return "{\n" + "".join(entries) + " " * indent + "}"


if __name__ == "__main__":
    target = Path(__file__).with_name("shapes.py")
    target.write_text(shapes_source())
    print(f"wrote {target}", file=sys.stderr)
