"""The strict base of every JSON request body of the API, and its shared field types.

Pydantic's default (lax) mode turns ``true`` into ``1`` and ``"1"`` into ``True``; a request
body is a contract, so its models are strict: a boolean is not a number, a number is not a
string. (Query and path parameters arrive as text and stay lax.) How the API reads the bytes
of a body before these models see it is ``trainyard.web.bodies``.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

NO_NUL = r"^[^\x00]*$"  # PostgreSQL cannot store NUL in text; refuse it at the door


class RequestBody(BaseModel):
    """Base of every JSON request body: unknown fields and loose types are errors."""

    model_config = ConfigDict(extra="forbid", strict=True)


def text_field(max_length: int, *, rule: re.Pattern[str] | None = None, **kwargs: Any) -> Any:
    """A string field of at most ``max_length`` characters, none of them NUL.

    ``rule`` is the service's own check of the value (a name's syntax): the OpenAPI document
    declares it, so that generated clients build valid values, while the service keeps
    enforcing it with a message that says what a valid name looks like.
    """
    if rule is not None:
        kwargs["json_schema_extra"] = {"pattern": f"^(?:{rule.pattern})$"}
    return Field(max_length=max_length, pattern=NO_NUL, **kwargs)


def _integral_float_as_int(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


# An integer field of a strict body: JSON Schema counts 26.0 as an integer, and so do we;
# booleans and strings stay errors.
WholeNumber = Annotated[int, BeforeValidator(_integral_float_as_int)]
