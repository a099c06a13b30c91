"""Sweeps (arrays): one job file's ``sweep`` section makes N jobs, one per point.

::

    parameters: {lr: 0.1, epochs: 10}
    sweep:
      grid: {lr: [0.1, 0.01], batch: [32, 64]}    # every combination: 4 jobs
      # or list: [{lr: 0.1}, {lr: 0.01, batch: 64}] # exactly these points
      parallel: 2                                 # at most 2 members run at once (Slurm's %2)
      metric: {pattern: "loss=([0-9.eE+-]+)"}     # or {name: loss}: what runtime.report writes

Each member is the file less its ``sweep`` section, its ``parameters`` the file's overridden
by its point (so ``<% $parameters.lr %>`` placeholders just work), its name the file's with
``-INDEX``, and every role's env holding ``TRAINYARD_SWEEP_ID``, ``TRAINYARD_SWEEP_INDEX``
and ``TRAINYARD_SWEEP_PARAMS`` (the point as JSON). Grid points come in the file's key order,
the last key varying fastest, as nested loops would.
"""

from __future__ import annotations

import copy
import difflib
import itertools
import json
import re
from dataclasses import dataclass
from typing import Any

import regex

from trainyard.spec.errors import FieldError, SpecError, show
from trainyard.spec.models import JOB_NAME_MAX

SWEEP = "sweep"
MAX_SWEEP_BYTES = 32 << 20  # its jobs' files together: each job stores its own
MAX_SWEEP_JOBS = 1000  # the most members one sweep may have (Slurm's MaxArraySize is 1001)
MAX_PATTERN = 200
ENV_ID = "TRAINYARD_SWEEP_ID"
ENV_INDEX = "TRAINYARD_SWEEP_INDEX"
ENV_PARAMS = "TRAINYARD_SWEEP_PARAMS"
_PLACEHOLDER = re.compile(r"\$parameters\.([A-Za-z_][A-Za-z0-9_]*)")
_KNOWN = ("grid", "list", "parallel", "metric")
_PARAMETER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Metric:
    """What a sweep shows of each member: the first group of ``pattern`` in the last line of
    its first task's log that matches, or the value ``name`` it reported (``runtime.report``)."""

    pattern: str | None = None
    name: str | None = None

    def as_data(self) -> dict[str, str]:
        return {"pattern": self.pattern} if self.pattern is not None else {"name": self.name or ""}


@dataclass(frozen=True)
class Sweep:
    """A job file's sweep section, checked: its points, in order."""

    points: tuple[dict[str, Any], ...]
    parallel: int | None = None
    metric: Metric | None = None
    section: dict[str, Any] | None = None  # as written, for the sweep's record and its clone


def split(document: Any) -> tuple[Sweep | None, Any]:
    """The document's sweep (None: it has none) and the document less it."""
    if not isinstance(document, dict) or SWEEP not in document:
        return None, document
    rest = {k: v for k, v in document.items() if k != SWEEP}
    sweep = parse(document[SWEEP])
    text = json.dumps(rest, default=str)
    size = len(text) + max((len(json.dumps(p, default=str)) for p in sweep.points), default=0)
    if size * len(sweep.points) > MAX_SWEEP_BYTES:
        raise SpecError.single(SWEEP, f"makes {len(sweep.points):,} jobs of {size >> 10:,} KiB each, more than "
                                      f"{MAX_SWEEP_BYTES >> 20} MiB of job files in all: make the file smaller (data "
                                      "belongs in a storage or the working directory) or the sweep")
    _refuse_misspelt(sweep, rest, text)
    return sweep, rest


def _refuse_misspelt(sweep: Sweep, rest: dict[str, Any], text: str) -> None:
    """A name the file neither declares in ``parameters`` nor uses in a placeholder, but that
    is close to one it does (``lrr`` beside ``lr``), would run every job with the file's own
    value: refused with the likely name. Other new names stay (a task may read them from
    ``TRAINYARD_SWEEP_PARAMS``)."""
    declared = rest.get("parameters")
    known = {str(k) for k in declared} if isinstance(declared, dict) else set()
    known |= set(_PLACEHOLDER.findall(text))  # ``rest`` as JSON
    where = "grid" if "grid" in (sweep.section or {}) else "list"
    problems = []
    for name in sorted({name for point in sweep.points for name in point} - known):
        if close := difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.75):
            problems.append(FieldError(f"{SWEEP}.{where}.{name}", f"not a parameter of the job file; did you mean "
                                       f"{close[0]!r}? (its parameters: {', '.join(sorted(known))})"))
    if problems:
        raise SpecError(problems)


def parse(section: Any) -> Sweep:
    """The sweep a ``sweep`` section describes; SpecError at each field that is wrong."""
    if not isinstance(section, dict):
        raise SpecError.single(SWEEP, "must be a mapping with grid or list (and optionally parallel and "
                                      f"metric), e.g. {{grid: {{lr: [0.1, 0.01]}}}} (got {show(section)})")
    problems = [FieldError(f"{SWEEP}.{k}", f"unknown field; a sweep has {', '.join(_KNOWN)}")
                for k in section if k not in _KNOWN]
    if ("grid" in section) == ("list" in section):
        problems.append(FieldError(SWEEP, "give exactly one of grid (every combination of values) or list "
                                          "(the points themselves)"))
    points: list[dict[str, Any]] = []
    if "grid" in section and "list" not in section:
        points = _grid(section["grid"], problems)
    elif "list" in section and "grid" not in section:
        points = _list(section["list"], problems)
    parallel = _parallel(section.get("parallel"), problems)
    metric = _metric(section.get("metric"), problems)
    if not problems and len(points) > MAX_SWEEP_JOBS:
        problems.append(FieldError(SWEEP, f"makes {len(points):,} jobs, more than the {MAX_SWEEP_JOBS:,} one "
                                          "sweep may make: split it into several sweeps"))
    if problems:
        raise SpecError(problems)
    return Sweep(tuple(points), parallel, metric, copy.deepcopy(section))


def _names_ok(keys: Any, where: str, problems: list[FieldError]) -> bool:
    ok = True
    for key in keys:
        if not isinstance(key, str) or not _PARAMETER.match(key):
            problems.append(FieldError(f"{where}.{key}", "must name a parameter: letters, digits and '_', "
                                                         f"not starting with a digit (got {show(key)})"))
            ok = False
    return ok


def _grid(grid: Any, problems: list[FieldError]) -> list[dict[str, Any]]:
    where = f"{SWEEP}.grid"
    if not isinstance(grid, dict) or not grid:
        problems.append(FieldError(where, "must map each parameter to its values, e.g. {lr: [0.1, 0.01], "
                                          f"batch: [32, 64]}} (got {show(grid)})"))
        return []
    ok = _names_ok(grid, where, problems)
    for key, values in grid.items():
        if not isinstance(values, list) or not values:
            problems.append(FieldError(f"{where}.{key}", f"must be a non-empty list of values (got {show(values)})"))
            ok = False
    if not ok:
        return []
    total = 1
    for values in grid.values():
        total *= len(values)
    if total > MAX_SWEEP_JOBS:  # before making them
        problems.append(FieldError(where, f"makes {total:,} jobs, more than the {MAX_SWEEP_JOBS:,} one sweep "
                                          "may make: split it into several sweeps"))
        return []
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(grid[k] for k in keys))]


def _list(points: Any, problems: list[FieldError]) -> list[dict[str, Any]]:
    where = f"{SWEEP}.list"
    if not isinstance(points, list) or not points:
        problems.append(FieldError(where, "must be a non-empty list of points, each a mapping of parameters, "
                                          f"e.g. [{{lr: 0.1}}, {{lr: 0.01}}] (got {show(points)})"))
        return []
    if len(points) > MAX_SWEEP_JOBS:
        problems.append(FieldError(where, f"makes {len(points):,} jobs, more than the {MAX_SWEEP_JOBS:,} one sweep "
                                          "may make: split it into several sweeps"))
        return []
    for i, point in enumerate(points):
        if not isinstance(point, dict):
            problems.append(FieldError(f"{where}[{i}]", f"must be a mapping of parameters (got {show(point)})"))
        else:
            _names_ok(point, f"{where}[{i}]", problems)
    return [dict(p) for p in points if isinstance(p, dict)]


def _parallel(value: Any, problems: list[FieldError]) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        problems.append(FieldError(f"{SWEEP}.parallel", "must be a whole number of at least 1: how many of "
                                                        f"the sweep's jobs may run at once (got {show(value)})"))
        return None
    return value


def _metric(value: Any, problems: list[FieldError]) -> Metric | None:
    where = f"{SWEEP}.metric"
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) != 1 or not {"pattern", "name"} & set(value):
        problems.append(FieldError(where, "must be {pattern: REGEX} (the last line of the log matching it; its "
                                          "first group is the value) or {name: NAME} (a value the job reports "
                                          f"with runtime.report(NAME=...)) (got {show(value)})"))
        return None
    if "name" in value:
        name = value["name"]
        if not isinstance(name, str) or not _PARAMETER.match(name):
            problems.append(FieldError(f"{where}.name", "must be a name of letters, digits and '_' "
                                                        f"(got {show(name)})"))
            return None
        return Metric(name=name)
    pattern = value["pattern"]
    if not isinstance(pattern, str) or not pattern or len(pattern) > MAX_PATTERN:
        problems.append(FieldError(f"{where}.pattern", f"must be a regular expression of 1 to {MAX_PATTERN} "
                                                       f"characters (got {show(pattern)})"))
        return None
    try:
        regex.compile(pattern)  # the engine that reads it (``services/sweep_metrics.py``)
    except regex.error as error:
        problems.append(FieldError(f"{where}.pattern", f"is not a regular expression: {error}"))
        return None
    return Metric(pattern=pattern)


def member_document(document: dict[str, Any], point: dict[str, Any], index: int, sweep_id: int) -> dict[str, Any]:
    """The job file of member ``index``: ``document`` (no sweep section) with the point's
    parameters, a name ending in ``-INDEX`` and the sweep's variables in every role's env."""
    member = copy.deepcopy(document)
    parameters = member.get("parameters")
    member["parameters"] = {**(parameters if isinstance(parameters, dict) else {}), **copy.deepcopy(point)}
    name = member.get("name")
    if isinstance(name, str) and name:
        suffix = f"-{index}"
        member["name"] = name[: JOB_NAME_MAX - len(suffix)] + suffix
    roles = member.get("taskRoles")
    if isinstance(roles, dict):
        variables = {ENV_ID: str(sweep_id), ENV_INDEX: str(index),
                     ENV_PARAMS: json.dumps(point, sort_keys=True, default=str)}
        for role in roles.values():
            if isinstance(role, dict):
                env = role.get("env")
                role["env"] = {**(env if isinstance(env, dict) else {}), **variables}
    return member


def not_a_job_file(document: Any) -> None:
    """Refuse a sweep sent where one job is expected (``POST /jobs``): at the field, saying
    where sweeps go."""
    if isinstance(document, dict) and SWEEP in document:
        raise SpecError.single(SWEEP, "a job file with a sweep makes several jobs: submit it with `yard submit` "
                                      "(it sees the sweep) or POST /api/v1/sweeps")

