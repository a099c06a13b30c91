"""Builders for the table-driven job-file error tests: small edits to a valid document."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from trainyard.spec.errors import FieldError, SpecError
from trainyard.spec.loading import validate_job

Mutation = Callable[[dict[str, Any]], None]


def errors_of(document: dict[str, Any]) -> list[FieldError]:
    with pytest.raises(SpecError) as caught:
        validate_job(document)
    return caught.value.errors


def setting(*keys: str, value: Any) -> Mutation:
    """A mutation that sets document[k1][k2]…[kn] = value, creating maps on the way."""

    def mutate(document: dict[str, Any]) -> None:
        target = document
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = value

    return mutate


def removing(*keys: str) -> Mutation:
    def mutate(document: dict[str, Any]) -> None:
        target = document
        for key in keys[:-1]:
            target = target[key]
        del target[keys[-1]]

    return mutate


def renaming_role(new_name: str) -> Mutation:
    def mutate(document: dict[str, Any]) -> None:
        document["taskRoles"] = {new_name: document["taskRoles"].pop("worker")}

    return mutate


W = ("taskRoles", "worker")
R = (*W, "resourcePerInstance")
