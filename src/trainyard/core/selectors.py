"""Resource expressions: which nodes and GPUs suit a task role, in CEL.

A task role may write ``resourcePerInstance.selector``, one expression in Google's Common
Expression Language (the language Kubernetes uses for the same purpose), over the
attributes of a node and, for a role with GPUs, of one of its devices::

    gpu.memoryMB >= 40000 && gpu.model in ["A100", "H100"] && node.labels["ib"] == "true"

This module owns the language for both ends: the job file's check (``compile_selector``,
called by ``spec/`` so that an error carries its field path and is refused at submit) and
the scheduler's evaluation (``Selector.allows``). It imports nothing of ours, so both can.

The implementation is ``cel-python`` (``celpy``): pure Python (nothing to build), a Lark
parser that reports the line and column of a syntax error, and an evaluator that never
reaches Python's ``eval``. It is slow per evaluation (about 0.5 ms), so callers evaluate
once per kind of node and device and remember the answer (``capacity.FreeNode.selected``).

Beyond the syntax, ``compile_selector`` refuses what would otherwise be found only at
scheduling time: names other than ``node`` and ``gpu`` (and the variables of macros such
as ``exists``), unknown attributes (``gpu.memroyMB``), ``gpu`` in a role without GPUs,
operators applied to the wrong types (``gpu.memoryMB >= "40000"``: each top-level clause
is evaluated once over sample attributes of the right types), and a result that is not a
boolean. At scheduling time an expression that cannot be evaluated on a node (a label the
node does not have: ``node.labels["ib"]``) is false there.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import celpy
from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError
from lark import Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedToken

MAX_LENGTH = 2000  # characters: an expression is a filter, not a program

# The attributes an expression may name, with their CEL type and meaning (docs/scheduling.md).
NODE_ATTRIBUTES: Mapping[str, tuple[str, str]] = {
    "name": ("string", "the node's name"),
    "labels": ("map(string, string)", "the node's labels: the backend's, then the admin's (`yard node label`)"),
    "cpu": ("double", "CPU cores"),
    "memoryMB": ("int", "memory in MiB"),
    "gpus": ("int", "number of GPUs"),
}
GPU_ATTRIBUTES: Mapping[str, tuple[str, str]] = {
    "model": ("string", "the device's model, e.g. A100"),
    "memoryMB": ("int", "the device's memory in MiB"),
    "index": ("int", "the device's index on its node"),
}
_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})


class SelectorError(ValueError):
    """An expression refused: ``message`` says what and where (line, column, a caret)."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.column = column


@dataclass(frozen=True)
class NodeFacts:
    """What an expression sees of a node."""

    name: str
    labels: Mapping[str, str]
    cpu_milli: int
    memory_mb: int
    gpus: int


@dataclass(frozen=True)
class GpuFacts:
    """What an expression sees of one device."""

    index: int
    model: str
    memory_mb: int


@dataclass(frozen=True)
class Clause:
    """One top-level ``&&`` operand, for why-pending: its text and its own program."""

    text: str
    program: Any = field(compare=False, repr=False)
    uses_gpu: bool
    # ``scope.attribute op number`` (e.g. gpu.memoryMB >= 40000): (scope, attribute, op)
    comparison: tuple[str, str, str] | None = None


@dataclass(frozen=True)
class Selector:
    """A checked expression, ready to evaluate."""

    source: str
    program: Any = field(compare=False, repr=False)
    uses_gpu: bool
    uses_name: bool  # whether an answer may differ between nodes alike but for their names
    uses_labels: bool  # whether it reads node labels, which admins change live
    uses_gpu_index: bool  # whether devices alike but for their index may differ
    clauses: tuple[Clause, ...]

    def allows(self, node: NodeFacts, gpu: GpuFacts | None = None) -> bool:
        """Whether the expression is true for this node (and device); an error is false."""
        return _true(self.program, _activation(node, gpu))


def compile_selector(source: str, *, gpus: bool) -> Selector:
    """Check ``source`` for a role with (``gpus``) or without GPUs; raises SelectorError."""
    return _compiled(source, gpus)


@lru_cache(maxsize=512)
def _compiled(source: str, gpus: bool) -> Selector:
    if not source.strip():
        raise SelectorError("must not be empty; leave it out to accept every node")
    if len(source) > MAX_LENGTH:
        raise SelectorError(f"must be at most {MAX_LENGTH} characters (got {len(source)})")
    env = celpy.Environment()
    tree = _parse(env, source)
    scopes = _check_names(tree, source, gpus)
    clauses = tuple(_clause(env, text, gpus) for text in _split_and(env, source))
    for clause in clauses:
        _check_types(clause, source)
    result = _sample_result(env.program(tree), gpus)
    if result is not None and not isinstance(result, celtypes.BoolType):
        raise SelectorError(f"must be true or false; it gives {_cel_type(result)}")
    node = scopes["node"]
    return Selector(source, env.program(tree), "gpu" in scopes, ("node", "name") in node, ("node", "labels") in node,
                    ("gpu", "index") in scopes.get("gpu", set()), clauses)


def _parse(env: celpy.Environment, source: str) -> Tree[Token]:
    try:
        return env.compile(source)
    except CELParseError as error:
        cause = error.__cause__ or error.__context__
        line, column = getattr(error, "line", None), getattr(error, "column", None)
        if isinstance(cause, UnexpectedToken):
            token = cause.token
            what = "end of the expression" if token.type == "$END" else repr(str(token))
            line, column = cause.line, cause.column
            if token.type == "$END":  # lark puts it at 1:1 or past the last token: say the end
                line, column = _end_of(source)
        elif isinstance(cause, UnexpectedCharacters):
            what = repr(source.splitlines()[cause.line - 1][cause.column - 1])
        else:
            what = "text"
        raise _at(f"syntax error: unexpected {what}", source, line, column) from None


def _end_of(source: str) -> tuple[int, int]:
    lines = source.rstrip().splitlines() or [""]
    return len(lines), len(lines[-1]) + 1


def _at(message: str, source: str, line: int | None, column: int | None) -> SelectorError:
    """The message with where it is: ``at line 1, column 17``, the line and a caret under it."""
    if line is None or column is None or line < 1:
        return SelectorError(message)
    lines = source.splitlines() or [""]
    text = lines[min(line, len(lines)) - 1]
    caret = " " * (column - 1) + "^"
    return SelectorError(f"{message} at line {line}, column {column}\n  {text}\n  {caret}", line, column)


def _check_names(tree: Tree[Token], source: str, gpus: bool) -> dict[str, set[tuple[str, str]]]:
    """Refuse unknown names and attributes; return the attributes used, by scope."""
    bound = set()
    for sub in tree.iter_subtrees():
        if sub.data == "member_dot_arg" and str(sub.children[1]) in _MACROS and len(sub.children) > 2:
            _refuse_nested(sub, source)
            args = sub.children[2]
            first = next(iter(args.children), None) if isinstance(args, Tree) else None
            ident = _lone_ident(first)
            if ident is not None:
                bound.add(str(ident))
    used: dict[str, set[tuple[str, str]]] = {"node": set()}
    for sub in tree.iter_subtrees_topdown():  # type: ignore[no-untyped-call]  # lark leaves it untyped
        if sub.data == "member_dot":
            scope = _lone_ident(sub.children[0])
            attribute = sub.children[1]
            if scope is None or str(scope) in bound:
                continue
            known = {"node": NODE_ATTRIBUTES, "gpu": GPU_ATTRIBUTES}.get(str(scope))
            if known is None:
                continue  # reported as an unknown name below
            if str(attribute) not in known:
                hint = difflib.get_close_matches(str(attribute), list(known), n=1)
                also = f"did you mean {scope}.{hint[0]}? " if hint else ""
                raise _at(
                    f"unknown attribute {scope}.{attribute} ({also}{scope} has {', '.join(known)})",
                    source, attribute.line, attribute.column,
                )
            used.setdefault(str(scope), set()).add((str(scope), str(attribute)))
        elif sub.data == "ident":
            name = sub.children[0]
            if str(name) in bound or str(name) == "node":
                continue
            if str(name) == "gpu":
                if not gpus:
                    raise _at("this role asks for no GPU, so its expression sees only node, not gpu",
                              source, name.line, name.column)
                continue
            hint = difflib.get_close_matches(str(name), ["node", "gpu"], n=1)
            also = f"did you mean {hint[0]}? " if hint else ""
            raise _at(f"unknown name {name} ({also}an expression sees node and gpu)", source, name.line, name.column)
    return used


def _refuse_nested(macro: Tree[Token], source: str) -> None:
    """One comprehension may not hold another: nested ones multiply (a few short lists make
    billions of steps), and an expression is evaluated at submit and by the scheduler."""
    for inner in macro.children[2].iter_subtrees() if isinstance(macro.children[2], Tree) else ():
        if inner.data == "member_dot_arg" and str(inner.children[1]) in _MACROS:
            name = inner.children[1]
            raise _at(f"{name}() inside {macro.children[1]}(): a comprehension may not hold another",
                      source, getattr(name, "line", None), getattr(name, "column", None))


def _lone_ident(node: Any) -> Token | None:
    """The identifier ``node`` is made of alone (``member > primary > ident``), if it is one."""
    while isinstance(node, Tree) and len(node.children) == 1 and node.data != "ident":
        node = node.children[0]
    if isinstance(node, Tree) and node.data == "ident":
        token = node.children[0]
        return token if isinstance(token, Token) else None
    return None


def _split_and(env: celpy.Environment, source: str) -> list[str]:
    """The top-level ``&&`` operands, as written; the whole when splitting would change the
    meaning (``a || b && c``, a conditional) or a piece does not stand alone."""
    pieces, depth, quote, start, i = [], 0, "", 0, 0
    while i < len(source):
        c = source[i]
        if quote:
            if c == "\\":
                i += 1
            elif source.startswith(quote, i):
                i += len(quote) - 1
                quote = ""
        elif c in "\"'":
            quote = source[i : i + 3] if source[i : i + 3] in ('"""', "'''") else c
            i += len(quote) - 1
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and source.startswith("||", i) or depth == 0 and c == "?":
            return [source.strip()]
        elif depth == 0 and source.startswith("&&", i):
            pieces.append(source[start:i])
            start = i + 2
            i += 1
        i += 1
    pieces.append(source[start:])
    texts = [" ".join(p.split()) for p in pieces]
    for text in texts:
        try:
            env.compile(text)
        except CELParseError:
            return [source.strip()]
    return texts


_COMPARISON = re.compile(r"^(node|gpu)\.(\w+)\s*(>=|>|<=|<|==)\s*-?\d+(\.\d+)?$")
_REVERSED = re.compile(r"^-?\d+(\.\d+)?\s*(>=|>|<=|<|==)\s*(node|gpu)\.(\w+)$")
_FLIP = {">=": "<=", ">": "<", "<=": ">=", "<": ">", "==": "=="}


def _clause(env: celpy.Environment, text: str, gpus: bool) -> Clause:
    comparison = None
    match = _COMPARISON.match(text)
    if match:
        comparison = (match.group(1), match.group(2), match.group(3))
    else:
        match = _REVERSED.match(text)
        if match:
            comparison = (match.group(3), match.group(4), _FLIP[match.group(2)])
    if comparison is not None and _attribute_type(comparison[0], comparison[1]) not in ("int", "double"):
        comparison = None
    uses_gpu = gpus and re.search(r"\bgpu\b", text) is not None
    return Clause(text, env.program(env.compile(text)), uses_gpu, comparison)


def _attribute_type(scope: str, attribute: str) -> str:
    known = NODE_ATTRIBUTES if scope == "node" else GPU_ATTRIBUTES
    return known[attribute][0] if attribute in known else ""


class _AnyLabels(dict[str, str]):
    """Sample labels that have every key, so that a clause on a label is type-checked."""

    def __contains__(self, key: object) -> bool:
        return True

    def __missing__(self, key: str) -> str:
        return ""


_SAMPLE_NODE = NodeFacts("node", _AnyLabels(), 1000, 1024, 1)
_SAMPLE_GPU = GpuFacts(0, "model", 1024)


def _check_types(clause: Clause, source: str) -> None:
    """Evaluate the clause over sample attributes: an operator on the wrong types is an
    error whatever the values (a missing map key is not: that depends on the node)."""
    try:
        clause.program.evaluate(_activation(_SAMPLE_NODE, _SAMPLE_GPU if clause.uses_gpu else None))
    except CELEvalError as error:
        _refuse_type_error(error, clause.text, source)
    except (TypeError, ValueError, ArithmeticError):  # celpy's own slips: not for us to judge
        return


def _sample_result(program: Any, gpus: bool) -> Any:
    try:
        return program.evaluate(_activation(_SAMPLE_NODE, _SAMPLE_GPU if gpus else None))
    except (CELEvalError, TypeError, ValueError, ArithmeticError):
        return None


def _refuse_type_error(error: CELEvalError, clause: str, source: str) -> None:
    args = error.args
    kind = args[1] if len(args) > 1 else None
    if kind is not TypeError:
        return  # no such key, division by zero: depends on the values, decided per node
    detail = str(args[2][0]) if len(args) > 2 and args[2] else str(args[0])
    types = re.findall(r"<class 'celpy\.celtypes\.(\w+)Type'>", detail)
    what = f" ({' and '.join(t.lower() for t in types)})" if types else ""
    start = source.find(clause.split()[0]) if clause.split() else -1
    line, column = _line_column(source, start) if start >= 0 else (None, None)
    raise _at(f"wrong types in {clause!r}: an operator or function cannot take these values{what}",
              source, line, column)


def _line_column(source: str, offset: int) -> tuple[int, int]:
    before = source[:offset]
    return before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1


def _cel_type(value: Any) -> str:
    name = type(value).__name__.removesuffix("Type").lower()
    return {"string": "a string", "int": "a number", "uint": "a number", "double": "a number",
            "list": "a list", "map": "a map"}.get(name, name)


def _activation(node: NodeFacts, gpu: GpuFacts | None) -> dict[str, Any]:
    labels = (_SampleLabels() if isinstance(node.labels, _AnyLabels)
              else celtypes.MapType({celtypes.StringType(k): celtypes.StringType(v) for k, v in node.labels.items()}))
    activation: dict[str, Any] = {
        "node": celtypes.MapType({
            celtypes.StringType("name"): celtypes.StringType(node.name),
            celtypes.StringType("labels"): labels,
            celtypes.StringType("cpu"): celtypes.DoubleType(node.cpu_milli / 1000),
            celtypes.StringType("memoryMB"): celtypes.IntType(node.memory_mb),
            celtypes.StringType("gpus"): celtypes.IntType(node.gpus),
        })
    }
    if gpu is not None:
        activation["gpu"] = celtypes.MapType({
            celtypes.StringType("model"): celtypes.StringType(gpu.model),
            celtypes.StringType("memoryMB"): celtypes.IntType(gpu.memory_mb),
            celtypes.StringType("index"): celtypes.IntType(gpu.index),
        })
    return activation


class _SampleLabels(celtypes.MapType):
    """A CEL map with every key (its value an empty string): see ``_AnyLabels``."""

    def __getitem__(self, key: Any) -> Any:
        return celtypes.StringType("")

    def __contains__(self, key: object) -> bool:
        return True


def _true(program: Any, activation: dict[str, Any]) -> bool:
    try:
        result = program.evaluate(activation)
    except (CELEvalError, TypeError, ValueError, ArithmeticError, KeyError):
        return False
    return isinstance(result, celtypes.BoolType) and bool(result)


def clause_allows(clause: Clause, node: NodeFacts, gpu: GpuFacts | None) -> bool:
    """Whether one clause is true for this node (and device)."""
    return _true(clause.program, _activation(node, gpu))


def attribute_value(scope: str, attribute: str, node: NodeFacts, gpu: GpuFacts | None) -> float | None:
    """A numeric attribute's value, for why-pending's "the largest GPU has …"."""
    if scope == "gpu":
        if gpu is None:
            return None
        return {"memoryMB": gpu.memory_mb, "index": gpu.index}.get(attribute)
    return {"cpu": node.cpu_milli / 1000, "memoryMB": node.memory_mb, "gpus": node.gpus}.get(attribute)
