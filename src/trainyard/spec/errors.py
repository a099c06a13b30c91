"""The job-file error types: one `FieldError` per problem, gathered in a `SpecError`."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FieldError:
    """One problem in a job file.

    ``path`` names the field the way a user writes it (``taskRoles.worker.commands[0]``),
    or a location in the text (``<line 3, column 7>``) when the file could not be read,
    or ``<document>`` for the file as a whole.
    """

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class SpecError(Exception):
    """A job file was rejected; ``errors`` lists every problem found, in file order."""

    def __init__(self, errors: Sequence[FieldError]) -> None:
        if not errors:
            raise ValueError("SpecError needs at least one FieldError")
        self.errors: list[FieldError] = list(errors)
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(str(error) for error in self.errors)

    @classmethod
    def single(cls, path: str, message: str) -> SpecError:
        """A SpecError holding one problem."""
        return cls([FieldError(path, message)])


DOCUMENT = "<document>"


def format_path(loc: Iterable[str | int]) -> str:
    """Write a location tuple as ``taskRoles.worker.commands[0]``.

    Integers are list indexes; strings are field names or map keys.
    """
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif text:
            text += f".{part}"
        else:
            text = str(part)
    return text


def join_path(*parts: str) -> str:
    """Join already formatted path pieces, skipping empty ones (``a`` + ``[0]`` → ``a[0]``)."""
    text = ""
    for part in parts:
        if not part:
            continue
        if text and not part.startswith("["):
            text += "."
        text += part
    return text


def show(value: Any, limit: int = 40) -> str:
    """A short, user-facing rendering of a value for ``(got …)`` in messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, str):
        text = value if len(value) <= limit else value[: limit - 1] + "…"
        return repr(text)
    return str(value)
