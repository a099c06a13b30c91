"""The API's models as the SDK reads its answers, each imported (and its validator built) at
the first answer that needs it: building every ``trainyard.schemas`` model up front cost a
`yard` command more than it spent talking to the server, and a command reads two or three
of them (issue 33). ``Model("admin.VcView")`` stands for ``VcView``; ``many=True`` for a list
of them."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Generic, TypeVar, Union

if TYPE_CHECKING:  # pydantic itself is imported with the first model: `yard jobs` reads none
    from pydantic import TypeAdapter

Reply = TypeVar("Reply")


class Model(Generic[Reply]):
    """A model of ``trainyard.schemas``, named ``"MODULE.NAME"``, read when first needed."""

    def __init__(self, where: str, *, many: bool = False) -> None:
        self.where, self.many = where, many
        self._adapter: TypeAdapter[Reply] | None = None

    def adapter(self) -> TypeAdapter[Reply]:
        if self._adapter is None:
            from pydantic import TypeAdapter

            module, _, name = self.where.rpartition(".")
            model: Any = getattr(importlib.import_module(f"trainyard.schemas.{module}"), name)
            self._adapter = TypeAdapter(list[model] if self.many else model)
        return self._adapter

    def __repr__(self) -> str:
        return f"Model({self.where!r}{', many=True' if self.many else ''})"


# What `Client._parse` reads an answer as (a string: TypeAdapter is not imported at run time).
Shape = Union[type[Reply], "TypeAdapter[Reply]", Model[Reply]]  # noqa: UP007


def adapter_for(shape: Shape[Reply]) -> TypeAdapter[Reply]:
    if isinstance(shape, Model):
        return shape.adapter()
    from pydantic import TypeAdapter

    return shape if isinstance(shape, TypeAdapter) else TypeAdapter(shape)
