"""`yard stop`, `yard suspend` and `yard resume` on several jobs at once: by ids and/or by
the filters `yard jobs` takes (like ``scancel -u bob -t PENDING``). The jobs are selected
through the jobs list, then each is acted on with the single-job call; one line per job."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from trainyard.cli.exits import EXIT_ERROR, EXIT_USAGE
from trainyard.cli.main import BULK_CONFIRM_OVER, BULK_DEFAULT_STATES
from trainyard.client import Client, ServerUnreachable, TrainyardError
from trainyard.schemas.jobs import JobDetail

LIST_PAGE = 500  # the jobs list's largest page
PAST = {"stop": "stopped", "suspend": "suspended", "resume": "resumed"}


def has_filters(args: argparse.Namespace) -> bool:
    return args.user is not None or args.state is not None or args.vc is not None


def bulk(client: Client, args: argparse.Namespace, action: str, act: Callable[[int], JobDetail],
         done: Callable[[JobDetail], str]) -> int:
    """Select the jobs, ask if there are many, then ``act`` on each: ``done`` says what
    happened; a refusal is a line on stderr and the exit code is non-zero."""
    if not args.ids and not has_filters(args):
        _fail(f"give the jobs to {action}: ids, or filters (--user, --state, --vc)")
        return EXIT_USAGE
    ids = _select(client, args, action) if has_filters(args) else list(dict.fromkeys(args.ids))
    if not ids:
        _fail(f"no jobs to {action}: none matches the filters")
        return 0
    if len(ids) > BULK_CONFIRM_OVER and not args.yes:
        if not sys.stdin.isatty():
            _fail(f"that is {len(ids)} jobs ({_ids(ids)}): add --yes to {action} them without a terminal to ask on")
            return EXIT_USAGE
        try:
            answer = input(f"{action} {len(ids)} jobs ({_ids(ids)})? [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            _fail("nothing done")
            return EXIT_ERROR
    failed = 0
    results: list[dict[str, object]] = []
    for job_id in ids:
        try:
            job = act(job_id)
        except ServerUnreachable:
            raise
        except TrainyardError as exc:
            failed += 1
            results.append({"id": job_id, "ok": False, "error": exc.message})
            if not args.json:
                print(f"job {job_id}: not {PAST[action]}: {exc.message}", file=sys.stderr)
            continue
        results.append({"id": job_id, "ok": True, "job": job.model_dump(mode="json")})
        if not args.json:
            print(done(job))
    if args.json:
        json.dump(results, sys.stdout, indent=2, sort_keys=True)
        sys.stdout.write("\n")
    if failed:
        _fail(f"{failed} of {len(ids)} jobs not {PAST[action]}")
    return EXIT_ERROR if failed else 0


def _select(client: Client, args: argparse.Namespace, action: str) -> list[int]:
    """The ids of the jobs the filters select, oldest first (every page); with ids given,
    only those among them."""
    states = ",".join(s for given in args.state for s in given.split(",") if s.strip()) if args.state else None
    if states is None:
        states = ",".join(BULK_DEFAULT_STATES[action])
    found: list[int] = []
    after: int | None = None
    while True:
        page = client.jobs(state=states, user=args.user, vc=args.vc, order="oldest", limit=LIST_PAGE, after=after)
        found += [job.id for job in page.items]
        if page.next is None:
            break
        after = page.next
    if not args.ids:
        return found
    selected = set(found)
    for job_id in dict.fromkeys(args.ids):
        if job_id not in selected:
            print(f"job {job_id}: not {PAST[action]}: the filters do not select it", file=sys.stderr)
    return [job_id for job_id in dict.fromkeys(args.ids) if job_id in selected]


def _ids(ids: list[int]) -> str:
    shown = ", ".join(str(i) for i in ids[:10])
    return shown + (f" and {len(ids) - 10} more" if len(ids) > 10 else "")


def _fail(message: str) -> None:
    print(f"yard: {message}", file=sys.stderr)
