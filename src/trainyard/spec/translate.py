"""Turning pydantic's ValidationError into short `FieldError`s a user can act on."""

from __future__ import annotations

import difflib
import types
import typing
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, ValidationError

from trainyard.spec.errors import FieldError, SpecError, format_path, show
from trainyard.spec.models import JobSpec

_KEY_MARK = "[key]"  # pydantic's last loc element when a mapping key (not value) is wrong

_TYPE_MESSAGES = {
    "string_type": "must be a string",
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "list_type": "must be a list",
    "dict_type": "must be a mapping",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
}


def spec_error_from(error: ValidationError, data: Any = None) -> SpecError:
    """One FieldError per pydantic error, plus the cross-field errors it carries. ``data``,
    the document as written, names fields the model stores under other names as written
    (an elastic role's ``instances: {min, max}``)."""
    found: list[FieldError] = []
    written = _as_written(data)
    for item in error.errors(include_url=False):
        if item["type"] == "spec_semantic":
            found.extend(item["ctx"]["errors"])
        else:
            problem = translate(item)
            found.append(replace(problem, path=written.get(problem.path, problem.path)))
    return SpecError(_unique(found))


def _as_written(data: Any) -> dict[str, str]:
    """The model's path -> the document's, for each elastic role's ``instances: {min, max}``
    (kept as ``instances`` and ``maxInstances``)."""
    roles = data.get("taskRoles") if isinstance(data, dict) else None
    if not isinstance(roles, dict):
        return {}
    found = {}
    for name, role in roles.items():
        if isinstance(role, dict) and isinstance(role.get("instances"), dict):
            base = ("taskRoles", str(name))
            found[format_path((*base, "instances"))] = format_path((*base, "instances", "min"))
            found[format_path((*base, "maxInstances"))] = format_path((*base, "instances", "max"))
    return found


def translate(item: Any) -> FieldError:
    """One pydantic error dict as a FieldError with a plain message."""
    loc = list(item["loc"])
    kind = item["type"]
    value = item.get("input")
    ctx = item.get("ctx") or {}
    if loc and loc[-1] == _KEY_MARK:  # loc is (..., the map, the bad key, "[key]")
        return FieldError(format_path(loc[:-2]), f"keys must be strings (got {show(value)})")
    path = format_path(loc)
    if kind == "spec":
        return FieldError(path, ctx.get("message", item["msg"]))
    if kind == "extra_forbidden":
        return FieldError(path, _unknown_field_message(loc))
    if kind == "missing":
        return FieldError(path, "is required")
    if kind in _TYPE_MESSAGES:
        return FieldError(path, f"{_TYPE_MESSAGES[kind]} (got {show(value)})")
    if kind == "enum":
        return FieldError(path, f"must be one of {ctx.get('expected', '?')} (got {show(value)})")
    if kind == "too_short":
        return FieldError(path, "must not be empty")
    if kind == "value_error":
        return FieldError(path, str(ctx.get("error", item["msg"])))
    message = str(item["msg"])
    return FieldError(path, message[:1].lower() + message[1:])


def _unique(errors: list[FieldError]) -> list[FieldError]:
    return list(dict.fromkeys(errors))


def _unknown_field_message(loc: list[Any]) -> str:
    field = str(loc[-1])
    model = model_at(loc[:-1])
    if model is None:
        return "unknown field"
    known = list(model.model_fields)
    close = difflib.get_close_matches(field, known, n=1, cutoff=0.65)
    if not close:
        lowered = {name.lower(): name for name in known}
        close = [lowered[field.lower()]] if field.lower() in lowered else []
    if close:
        return f"unknown field; did you mean '{close[0]}'?"
    return f"unknown field (allowed here: {', '.join(known)})"


def model_at(loc: list[Any]) -> type[BaseModel] | None:
    """The model class that validates the object at ``loc`` inside a JobSpec, if any."""
    current: Any = JobSpec
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                return None
            current = field.annotation
        elif typing.get_origin(current) is dict:
            current = typing.get_args(current)[1]
        elif typing.get_origin(current) is list:
            current = typing.get_args(current)[0]
        else:
            return None
    current = _unwrap(current)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return current
    return None


def _unwrap(annotation: Any) -> Any:
    """Strip ``Annotated[...]`` and ``X | None`` down to the type that matters."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            members = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation
