"""The `<% $parameters.x %>` placeholder language: finding, resolving and rendering references.

This mirrors OpenPAI's rest-server, which renders commands with mustache using `<%` `%>`
as tags and looks names up with dots walking into nested maps (`$parameters.a.b`) and
`[N]` indexing into lists (`$data.uri[0]`). Unlike OpenPAI, which silently renders an
unknown name as an empty string, a reference that does not resolve is an error here:
a typo in a parameter name should stop the submission, not run the job with a blank.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_TAG = re.compile(r"<%(.*?)%>", re.DOTALL)
_REFERENCE = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)((?:\.[^.\s\[\]]+|\[\d+\])*)")
_INDEX = re.compile(r"\[(\d+)\]")

#: The roots a reference may start with. `data`, `output` and `script` name the
#: prerequisite a task role selected with its `data:`/`output:`/`script:` field.
ROOTS = ("parameters", "secrets", "data", "output", "script")
_NOUNS = {"parameters": "parameter", "secrets": "secret"}


class TemplateError(ValueError):
    """A placeholder that cannot be read or does not resolve."""


@dataclass(frozen=True)
class Reference:
    """One `<% $root.key.path %>` occurrence in a string."""

    root: str
    keys: tuple[str, ...]
    tag: str

    @property
    def dotted(self) -> str:
        """The key path as the user wrote it, with indexes as dots (``a.b``, ``uri.0``)."""
        return ".".join(self.keys)


def find_references(text: str) -> list[Reference]:
    """Every reference in ``text``, in order; raises TemplateError on a malformed tag."""
    found: list[Reference] = []
    for match in _TAG.finditer(text):
        found.append(_parse_tag(match.group(0), match.group(1)))
    if "<%" in _TAG.sub("", text):
        raise TemplateError("unclosed placeholder '<%'; close it with '%>'")
    return found


def _parse_tag(tag: str, inner: str) -> Reference:
    parsed = _REFERENCE.fullmatch(inner.strip())
    if parsed is None:
        raise TemplateError(
            f"cannot read placeholder {tag!r}; write it as <% $parameters.name %> "
            "or <% $secrets.name %>"
        )
    root, rest = parsed.group(1), parsed.group(2)
    if root not in ROOTS:
        raise TemplateError(
            f"unknown reference '${root}' in {tag!r}; use $parameters.<name> or $secrets.<name>"
        )
    keys = tuple(key for key in _INDEX.sub(r".\1", rest).split(".") if key)
    if not keys:
        noun = _NOUNS.get(root, "field")
        raise TemplateError(f"'${root}' must name a {noun}, as in <% ${root}.name %>")
    return Reference(root=root, keys=keys, tag=tag)


def resolve(reference: Reference, context: Mapping[str, Any]) -> Any:
    """The value a reference points at; raises TemplateError when it points at nothing.

    ``context`` maps a root (``parameters``) to its value; a root missing from the
    context (a task role that selected no `data` prerequisite) is reported as such.
    """
    if reference.root not in context or context[reference.root] is None:
        raise TemplateError(
            f"'${reference.root}' is used but this task role selects no "
            f"{reference.root} prerequisite (set taskRoles.<role>.{reference.root})"
        )
    value = context[reference.root]
    keys = reference.keys
    index = 0
    while index < len(keys):
        found, value, index = _step(value, keys, index)
        if not found:
            noun = _NOUNS.get(reference.root, f"${reference.root} field")
            raise TemplateError(f"unknown {noun} '{reference.dotted}'")
    return value


def _step(value: Any, keys: tuple[str, ...], index: int) -> tuple[bool, Any, int]:
    """Take one step down ``value`` along ``keys[index:]``.

    In a map, the longest run of keys that is itself a key wins, so both
    ``{"a": {"b": 1}}`` and ``{"a.b": 1}`` answer ``$parameters.a.b``.
    """
    if isinstance(value, Mapping):
        for end in range(len(keys), index, -1):
            candidate = ".".join(keys[index:end])
            if candidate in value:
                return True, value[candidate], end
        return False, None, index
    if isinstance(value, list) and keys[index].isdigit() and int(keys[index]) < len(value):
        return True, value[int(keys[index])], index + 1
    return False, None, index


def to_text(value: Any) -> str:
    """How a resolved value is written into a command or an environment value."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


class RenderTooLarge(TemplateError):
    """Rendering went past its budget (``RenderBudget``); raised as soon as it did, so that
    a value used thousands of times never becomes more than the budget in memory."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"renders to more than {limit:,} bytes")
        self.limit = limit


class RenderBudget:
    """Bytes (UTF-8) that rendering may still produce, shared by every string rendered with
    it: one task role's commands and environment together."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def spend(self, piece: str) -> None:
        # Characters first: a piece that is too long by its length alone is never encoded.
        if self.used + len(piece) > self.limit:
            raise RenderTooLarge(self.limit)
        self.used += len(piece.encode("utf-8", "surrogatepass"))
        if self.used > self.limit:
            raise RenderTooLarge(self.limit)


def render_with(text: str, context: Mapping[str, Any], budget: RenderBudget | None = None) -> str:
    """Replace every placeholder in ``text`` with its value from ``context``; with a
    ``budget``, raise RenderTooLarge as soon as the result would pass it."""
    find_references(text)  # reject malformed and unclosed tags before substituting
    pieces: list[str] = []
    end = 0
    for match in _TAG.finditer(text):
        reference = _parse_tag(match.group(0), match.group(1))
        for piece in (text[end:match.start()], to_text(resolve(reference, context))):
            if budget is not None:
                budget.spend(piece)
            pieces.append(piece)
        end = match.end()
    if budget is not None:
        budget.spend(text[end:])
    pieces.append(text[end:])
    return "".join(pieces)
