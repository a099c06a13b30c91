"""What the most run commands show, read from the server's JSON as it came, without the API's
pydantic models: ``yard jobs``'s table, what ``yard submit`` says of the job it made, and the
tasks ``yard logs`` names beside the one it showed. Importing pydantic and building the models
was the larger half of these commands' cost (issue 33). Only the fields shown are read, each
checked for its type and given the default ``schemas/jobs.py`` gives it; a state is read as
the model reads it (``JobState``). ``tests/cli/test_cli_plain.py`` holds what they show equal
to what the models give. Anything else (a field missing or of another type: another server,
another version) raises ValueError, and the caller reads the answer with the models, which
say what is wrong."""

from __future__ import annotations

import json
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from trainyard.core.states import JobState


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


def task_roles(answer: bytes) -> dict[str, dict[str, Any]]:
    """A job's task roles as its ``spec`` (the job file as the server shows it) has them;
    ValueError for an answer that is not a job."""
    try:
        spec = json.loads(answer)["spec"]
        roles = spec.get("taskRoles") or {}
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a job: {exc!r}") from exc
    if not isinstance(roles, dict) or not all(isinstance(role, dict) for role in roles.values()):
        raise ValueError("not a job's task roles")
    return roles


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
