"""Refusing deeply nested job files before any parser recurses into them.

Both parsers Trainyard uses recurse once per nesting level: ``json.loads`` in C (it stops
with a RecursionError, late), and PyYAML's composer in compiled code (libyaml through
Cython), which does not stop at all: a 60 KB ``p: [[[[…]]]]`` overflows the C stack and
kills the whole server. So the text is measured first, by means that do not recurse: a
regular-expression scan of JSON's brackets, and libyaml's flat event stream for YAML
(its parser keeps an explicit stack, so it is safe at any depth). Past ``MAX_DEPTH``
levels the file is refused, naming the field where it got too deep.

``MAX_DEPTH`` is also what ``plaindata`` enforces on the parsed document (YAML aliases
can nest data deeper than the text shows).
"""

from __future__ import annotations

import json
import re

import yaml

from trainyard.spec.errors import DOCUMENT, SpecError

MAX_DEPTH = 32

# A JSON string (escapes included), or one structural character.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{},:]', re.DOTALL)
# libyaml's parser when PyYAML was built with it: fast, and it keeps its own stack.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def too_deep(path: str) -> SpecError:
    return SpecError.single(
        path, f"nested more than {MAX_DEPTH} levels deep; a job file needs far fewer (lists and mappings count)"
    )


def _path(stack: list[_Frame]) -> str:
    """The field path down to the child being read in each open container of ``stack``."""
    text = ""
    for frame in stack:
        if frame.label is None:
            break
        if frame.kind == "list":
            text += f"[{frame.label}]"
        else:
            text = f"{text}.{frame.label}" if text else str(frame.label)
    return text or DOCUMENT


def check_json_depth(text: str) -> None:
    """Raise SpecError if ``text``'s arrays and objects nest deeper than ``MAX_DEPTH``.

    Malformed text is left for ``json.loads`` to report; only depth is judged here.
    """
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return
    stack: list[_Frame] = []
    last_string: str | None = None  # a key is the last string before a ':'
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token in "[{":
            if len(stack) >= MAX_DEPTH:
                raise too_deep(_path(stack))
            stack.append(_Frame("list", "item", 0, False) if token == "[" else _Frame("map", "item", None, True))
        elif token in "]}":
            if stack:
                stack.pop()
        elif token == ",":
            if stack and stack[-1].kind == "list":
                stack[-1].label = int(stack[-1].label or 0) + 1
        elif token == ":":
            if stack and stack[-1].kind == "map":
                stack[-1].label = last_string
        else:
            try:
                last_string = json.loads(token)
            except ValueError:
                last_string = token[1:-1]


def check_yaml_depth(text: str) -> None:
    """Raise SpecError if ``text``'s collections nest deeper than ``MAX_DEPTH``.

    Walks libyaml's events (no recursion); a syntax error stops the walk quietly and is
    left for the real load to report with its line and column.
    """
    if text.count("\n") + text.count("[") + text.count("{") < MAX_DEPTH:
        return  # each level of nesting needs a line or a bracket
    stack: list[_Frame] = []
    try:
        for event in yaml.parse(text, Loader=_Loader):
            if isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
                frame = stack.pop()
                if frame.role == "value":
                    stack[-1].want_key = True
                continue
            if not isinstance(event, yaml.NodeEvent):
                continue  # stream and document boundaries
            role = "item"
            if stack:
                parent = stack[-1]
                if parent.kind == "list":
                    parent.label = int(parent.label or 0) + 1
                elif parent.want_key:
                    role, parent.want_key = "key", False
                    parent.label = event.value if isinstance(event, yaml.ScalarEvent) else "?"
                else:
                    role = "value"
            if isinstance(event, yaml.CollectionStartEvent):
                if len(stack) >= MAX_DEPTH:
                    raise too_deep(_path(stack))
                is_map = isinstance(event, yaml.MappingStartEvent)
                stack.append(_Frame("map" if is_map else "list", role, -1 if not is_map else None, is_map))
            elif role == "value":
                stack[-1].want_key = True
    except yaml.YAMLError:
        return


class _Frame:
    """One open collection while walking YAML events."""

    __slots__ = ("kind", "role", "label", "want_key")

    def __init__(self, kind: str, role: str, label: str | int | None, want_key: bool) -> None:
        self.kind = kind  # "map" or "list"
        self.role = role  # what it is in its parent: "key", "value" or "item"
        self.label = label  # the key or index of the child being read
        self.want_key = want_key  # a map: whether the next node is a key
