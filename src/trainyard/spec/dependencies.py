"""The job file's ``dependencies``: jobs this one waits for, as Slurm's ``--dependency``.

Written as a map from condition to job ids, or as Slurm's own text::

    dependencies:
      afterok: [12, 13]     # start once jobs 12 and 13 have succeeded
      afterany: [14]        # ... and job 14 has ended, however it ended
      afternotok: [15]      # ... and job 15 has failed or was stopped

    dependencies: "afterok:12:13,afterany:14"

Every listed condition must hold before the job is scheduled. The ids must name jobs that
exist when the job is submitted (so a cycle cannot be written), and no job may wait for
itself; the service checks those (``services/dependencies.py``). What a condition means
for each state of the job waited for is ``core/dependencies.py``'s.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

CONDITIONS = ("afterok", "afterany", "afternotok")
MAX_DEPENDENCIES = 100


def _problem(message: str) -> PydanticCustomError:
    return PydanticCustomError("spec", "{message}", {"message": message})


def parse_slurm(text: str) -> dict[str, list[int]]:
    """``afterok:12:13,afterany:14`` as ``{"afterok": [12, 13], "afterany": [14]}``; ValueError
    (saying what is wrong) for anything else. ``?`` (Slurm's "any of") is not supported."""
    parsed: dict[str, list[int]] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        condition, _, ids = part.partition(":")
        condition = condition.strip()
        if condition not in CONDITIONS:
            raise ValueError(f"{condition!r} is not a dependency condition: use one of {', '.join(CONDITIONS)}, "
                             "e.g. afterok:12:13,afterany:14")
        if not ids:
            raise ValueError(f"{condition} names no job: write {condition}:ID[:ID...]")
        for raw in ids.split(":"):
            if not raw.strip().isdigit() or len(raw.strip()) > 10:
                raise ValueError(f"{raw[:20]!r} in {part[:40]!r} is not a job id")
            parsed.setdefault(condition, []).append(int(raw))
            if sum(map(len, parsed.values())) > MAX_DEPENDENCIES:
                raise ValueError(f"at most {MAX_DEPENDENCIES} dependencies")
    return parsed


def _from_text(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return parse_slurm(value)
        except ValueError as error:
            raise _problem(str(error)) from None
    return value


def _job_id(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).strip().isdigit():
        raise _problem(f"must be a job id, a whole number (got {value!r})")
    number = int(value)
    if number < 1:
        raise _problem(f"must be a job id, ≥ 1 (got {number})")
    return number


JobId = Annotated[int, BeforeValidator(_job_id)]


def _none_to_list(value: Any) -> Any:
    return [] if value is None else value


IdList = Annotated[list[JobId], BeforeValidator(_none_to_list), Field(max_length=MAX_DEPENDENCIES)]


class Dependencies(BaseModel):
    """The jobs a job waits for, by condition (see the module doc)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    afterok: IdList = Field(default_factory=list)
    afterany: IdList = Field(default_factory=list)
    afternotok: IdList = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> Dependencies:
        if sum(len(getattr(self, c)) for c in CONDITIONS) > MAX_DEPENDENCIES:
            raise _problem(f"at most {MAX_DEPENDENCIES} dependencies")
        for condition in CONDITIONS:
            twice = sorted(i for i, n in Counter(getattr(self, condition)).items() if n > 1)
            if twice:
                raise _problem(f"{condition} names job {twice[0]} twice")
        both = sorted(set(self.afterok) & set(self.afternotok))
        if both:
            raise _problem(f"job {both[0]} is in both afterok and afternotok: it cannot both succeed and fail, "
                           "so this job could never start")
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Only the conditions that name jobs, as a user writes them."""
        data = handler(self)
        return {k: v for k, v in data.items() if v} if isinstance(data, dict) else data

    def listed(self) -> Iterator[tuple[str, int, str]]:
        """(condition, job id, field path) for each dependency, in the file's order."""
        for condition in CONDITIONS:
            for i, job_id in enumerate(getattr(self, condition)):
                yield condition, job_id, f"dependencies.{condition}[{i}]"

    def __bool__(self) -> bool:
        return any(getattr(self, c) for c in CONDITIONS)


DependencyField = Annotated[Dependencies | None, BeforeValidator(_from_text)]
