"""``yard account``: your e-mail address and your default job notices (``notify``, ``email``;
an admin: anyone's, ``--user``), and ``yard submit --notify`` (``with_notify``)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from trainyard.cli import render
from trainyard.client import Client, UsageError

if TYPE_CHECKING:  # `yard job`'s notices are read without the models (cli/plain.py)
    from trainyard.schemas.notices import AccountNotifyView, JobNoticeView


def cmd_account(client: Client, args: argparse.Namespace) -> int:
    if args.action == "notify":
        if args.off == (args.on is not None):
            raise UsageError("give --on EVENTS (e.g. --on failed,preempted), or --off")
        view = client.set_account_notify(args.on or [], email=args.email, webhook=args.webhook, name=args.user)
    elif args.action == "email":
        if args.remove == (args.address is not None):
            raise UsageError("give an ADDRESS, or --remove")
        view = client.set_email(args.address, name=args.user)
    else:
        view = client.account_notify(args.user)
    render.print_json(view) if args.json else print(account_text(view))
    return 0


def account_text(view: AccountNotifyView) -> str:
    lines = [f"user:     {view.user}", f"e-mail:   {view.email or '(none: yard account email ADDRESS)'}"]
    notify = view.notify
    if notify is None:
        lines.append("notices:  none by default (a job's file may ask: notify: {on: [failed]})")
    else:
        how = (["e-mail"] if notify.email else []) + ([f"webhook {notify.webhook}"] if notify.webhook else [])
        lines.append(f"notices:  {', '.join(notify.on)} by {' and '.join(how) or 'nothing'}")
    if not view.emailEnabled:
        lines.append("note:     this server sends no e-mail (no SMTP server set); webhooks still work")
    return "\n".join(lines)


def with_notify(data: bytes, content_type: str, on: list[str]) -> tuple[bytes, str]:
    """The job file with ``notify.on`` set to ``on`` (its ``email`` and ``webhook`` kept), as JSON."""
    import yaml  # a job file's reader: not for `yard job`, which shows notices (issue 33)

    try:
        document: Any = json.loads(data) if content_type == "application/json" else yaml.safe_load(data)
    except (ValueError, yaml.YAMLError) as exc:
        raise UsageError(f"--notify needs a job file it can read: {exc}") from None
    if not isinstance(document, dict):
        raise UsageError("--notify needs a job file that is a mapping (name, taskRoles, …)")
    notify = document.get("notify") or {}
    if not isinstance(notify, dict):
        raise UsageError("--notify: the job file's notify is not a mapping")
    notify = {("on" if key is True else key): value for key, value in notify.items()}  # YAML 1.1 reads on: as true
    document["notify"] = {**notify, "on": on}
    return json.dumps(document, default=str).encode(), "application/json"


def notices_text(notices: list[JobNoticeView]) -> str:
    """``yard job``'s notices: what was sent, what waits, what failed and why."""
    lines = ["notices:"]
    for n in notices:
        when = f" at {render.when(n.sentAt)}" if n.sentAt is not None else ""
        why = f": {n.error}" if n.error and n.state != "sent" else ""
        lines.append(f"  {n.kind} by {n.channel}: {n.state}{when} (tries {n.tries}){why}")
    return "\n".join(lines)
