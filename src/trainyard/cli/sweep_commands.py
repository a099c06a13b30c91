"""``yard sweep`` (list, show, stop, clone) and ``yard submit`` of a sweep. Parsers in
``cli.sweep_parser``."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

import yaml

from trainyard.cli import render
from trainyard.cli.exits import EXIT_ERROR, EXIT_USAGE
from trainyard.client import Client
from trainyard.core.states import JobState

if TYPE_CHECKING:
    from trainyard.schemas.sweeps import SweepDetail, SweepSummary


def grid_from_flags(flags: list[str]) -> dict[str, list[Any]]:
    """``["lr=0.1,0.01", "batch=32,64"]`` as a grid; each value read as YAML reads it (0.1 a
    number, adam a string). ValueError saying which flag is wrong."""
    grid: dict[str, list[Any]] = {}
    for flag in flags:
        name, sep, values = flag.partition("=")
        if not sep or not name.strip() or not values.strip():
            raise ValueError(f"--sweep {flag!r}: write NAME=V1,V2,..., e.g. --sweep lr=0.1,0.01")
        grid[name.strip()] = [yaml.safe_load(v) if v.strip() else "" for v in values.split(",")]
    return grid


def sweep_document(data: bytes, flags: list[str], parallel: int | None) -> dict[str, Any] | None:
    """The job file as a sweep to submit, with the flags' grid and cap; None when it is no
    sweep (no flags and no ``sweep`` section). ValueError for what cannot be combined."""
    try:
        document = yaml.safe_load(data)
    except yaml.YAMLError:
        document = None  # the server says what is wrong with it, at the line
    has_section = isinstance(document, dict) and "sweep" in document
    if not flags and parallel is None and not has_section:
        return None
    if not isinstance(document, dict):
        raise ValueError("a sweep needs a job file that is a mapping (name, taskRoles, ...)")
    section = dict(document.get("sweep") or {}) if has_section else {}
    if flags:
        if "list" in section:
            raise ValueError("the job file's sweep has a list: --sweep adds to a grid; put the points in one place")
        section["grid"] = {**(section.get("grid") or {}), **grid_from_flags(flags)}
    if parallel is not None:
        section["parallel"] = parallel
    if "grid" not in section and "list" not in section and not has_section:
        raise ValueError("--parallel caps a sweep: give its values with --sweep NAME=V1,V2 or a sweep: section")
    return {**document, "sweep": section}


def submit(client: Client, args: argparse.Namespace, data: bytes, *, workdir: str | None = None) -> int | None:
    """``yard submit`` of a sweep (every job of it in ``workdir``, an upload's digest, when
    given); None when the file and flags make no sweep."""
    try:
        document = sweep_document(data, args.sweep, args.parallel)
    except ValueError as error:
        print(f"yard: {error}", file=sys.stderr)
        return EXIT_USAGE
    if document is None:
        return None
    if args.dry_run:
        print("yard: --dry-run checks one job; a sweep is checked whole when it is submitted (nothing is made "
              "if any of its jobs is refused)", file=sys.stderr)
        return EXIT_USAGE
    if workdir is not None:
        document = {**document, "workdir": workdir}
    sweep = client.submit_sweep(document, idempotency_key=args.idempotency_key)
    if args.json:
        render.print_json(sweep)
        return 0
    first, last = sweep.members[0].jobId, sweep.members[-1].jobId
    print(f"submitted sweep {sweep.id} ({sweep.name}): {render.plural(sweep.size, 'job')}, {first}..{last}"
          + (f", at most {sweep.parallel} at once" if sweep.parallel else "")
          + f"; follow it with `yard sweep show {sweep.id} --watch`")
    return 0


def _params(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in params.items())


def _states(summary: SweepSummary) -> str:
    return ", ".join(f"{count} {state}" for state, count in sorted(summary.states.items()))


def sweeps_table(items: list[SweepSummary]) -> str:
    rows = [[str(s.id), s.name, s.user, str(s.size), str(s.parallel or "-"), _states(s),
             render.when(s.createdAt)] for s in items]
    return render.table(["SWEEP", "NAME", "USER", "JOBS", "PARALLEL", "STATES", "CREATED"], rows)


def sweep_text(sweep: SweepDetail) -> str:
    metric = "-" if sweep.metric is None else ", ".join(f"{k}: {v}" for k, v in sweep.metric.items())
    head = [f"sweep {sweep.id} ({sweep.name}) of {sweep.user}: {render.plural(sweep.size, 'job')}, {_states(sweep)}",
            f"  parallel: {sweep.parallel or 'as many as fit'}    metric: {metric}"]
    rows = [[str(m.index), str(m.jobId), _params(m.params), str(m.state),
             m.metric if m.metric is not None else "-", m.pending.short or m.pending.reason if m.pending else ""]
            for m in sweep.members]
    return "\n".join([*head, render.table(["INDEX", "JOB", "PARAMETERS", "STATE", "METRIC", "PENDING"], rows)])


def cmd_sweep(client: Client, args: argparse.Namespace) -> int:
    if args.action == "list":
        items = list(client.sweeps(user=args.user, limit=args.limit))
        if args.json:
            render.print_json(items)
        else:
            print(sweeps_table(items) if items else "no sweeps")
        return 0
    if args.action == "show":
        if not args.watch:
            sweep = client.sweep(args.id)
            render.print_json(sweep) if args.json else print(sweep_text(sweep))
            return 0

        def show(current: SweepDetail) -> None:
            render.print_json(current) if args.json else print(sweep_text(current) + "\n", flush=True)

        sweep = client.wait_sweep(args.id, poll=args.interval, on_change=show)
        return 0 if all(m.state == JobState.SUCCEEDED for m in sweep.members) else EXIT_ERROR
    if args.action == "stop":
        result = client.stop_sweep(args.id)
        if args.json:
            render.print_json(result)
        else:
            print(f"sweep {args.id}: {len(result.stopped)} jobs told to stop"
                  + (f", {len(result.refused)} had ended already" if result.refused else ""))
        return 0
    sweep = client.clone_sweep(args.id)
    if args.json:
        render.print_json(sweep)
    else:
        print(f"submitted sweep {sweep.id} ({sweep.name}), a clone of sweep {args.id}: "
              f"{render.plural(sweep.size, 'job')}")
    return 0
