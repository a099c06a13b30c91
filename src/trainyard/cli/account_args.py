"""``yard account``'s and ``yard submit --notify``'s arguments: the standard library only,
as ``yard --help`` loads them (``account_commands.py`` runs them)."""

from __future__ import annotations

import argparse

NOTIFY_ON = ("succeeded", "failed", "stopped", "ended", "preempted")
NOTIFY_HELP = ("which events: comma-separated among succeeded, failed, stopped, ended (any of those three), "
               "preempted (the scheduler requeued or suspended it)")


def notify_on(text: str) -> list[str]:
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in NOTIFY_ON]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"{text!r}: name events among {', '.join(NOTIFY_ON)}, e.g. failed,preempted")
    return names


def add_account_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("account", help="your e-mail address and the notices you get when your jobs end")
    p.add_argument("--user", help="another user's account (admin)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    account_sub = p.add_subparsers(dest="action", metavar="ACTION")
    q = account_sub.add_parser("notify", help="your default for jobs whose file has no `notify` (--off: none)")
    q.add_argument("--on", type=notify_on, metavar="EVENTS", help=NOTIFY_HELP)
    q.add_argument("--email", action=argparse.BooleanOptionalAction, default=True,
                   help="e-mail them to your address (yard account email); default: yes")
    q.add_argument("--webhook", metavar="URL", help="also POST them as JSON to this http(s) URL (a public address)")
    q.add_argument("--off", action="store_true", help="no notices unless a job's file asks")
    q = account_sub.add_parser("email", help="set where your notices are e-mailed (--remove: nowhere)")
    q.add_argument("address", nargs="?")
    q.add_argument("--remove", action="store_true", help="remove the address")
