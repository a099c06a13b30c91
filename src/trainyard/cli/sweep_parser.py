"""``yard sweep``'s parser and ``yard submit``'s sweep flags (argparse only: ``cli.main``
imports this before it knows which command runs)."""

from __future__ import annotations

import argparse


def add_submit_sweep_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sweep", action="append", default=[], metavar="NAME=V1,V2,...",
                   help="make a sweep: one job per combination of the values given (repeat for more "
                   "parameters; each job's parameters override the file's); like a sweep: {grid: ...} section")
    p.add_argument("--parallel", type=int, metavar="N", default=None,
                   help="with a sweep: at most N of its jobs run at once (Slurm's --array ...%%N)")


def add_sweep_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("sweep", help="sweeps: the jobs one submit made from a grid or list of parameters")
    sweep_sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    q = sweep_sub.add_parser("list", help="your sweeps, newest first (an admin: everyone's)")
    q.add_argument("--user", help="only this user's sweeps (admins)")
    q.add_argument("--limit", type=int, default=20, help="how many (default 20)")
    q.add_argument("--json", action="store_true", help="print the API's JSON")
    q = sweep_sub.add_parser("show", help="one sweep: each job's index, parameters, state and metric")
    q.add_argument("id", type=int)
    q.add_argument("--watch", action="store_true",
                   help="follow it: show it again as it changes, until every job has ended (exit 0 if all succeeded)")
    q.add_argument("--interval", type=float, default=5.0, help="with --watch: seconds between looks (default 5)")
    q.add_argument("--json", action="store_true", help="print the API's JSON")
    q = sweep_sub.add_parser("stop", help="stop every job of a sweep that has not ended")
    q.add_argument("id", type=int)
    q.add_argument("--json", action="store_true", help="print the API's JSON")
    q = sweep_sub.add_parser("clone", help="submit a sweep again (the same job file, its secrets kept)")
    q.add_argument("id", type=int)
    q.add_argument("--json", action="store_true", help="print the API's JSON")
