"""``yard user``, ``yard token``, ``yard vc``, ``yard group``, ``yard quota`` and ``yard node``:
users and their tokens, and cluster administration."""

from __future__ import annotations

import argparse
import getpass
import os
import stat
import sys
from collections.abc import Sequence
from typing import IO

from pydantic import BaseModel

from trainyard.cli import render
from trainyard.cli.exits import EXIT_ERROR
from trainyard.client import Client, UsageError
from trainyard.core.labels import parse_label_arguments
from trainyard.core.names import ANY_MODEL, DEFAULT_VC
from trainyard.schemas.admin import RemovalResult, VcView

TOKEN_FILE_HINT = ("the token is a password: keep it in a file only you can read, "
                   "e.g. `(umask 077; yard token create --json > token.json)`")


def _jobs(ids: Sequence[int]) -> str:
    return f"job{'s' if len(ids) > 1 else ''} {', '.join(map(str, ids))}"


def removal_text(result: RemovalResult, *, kept_hint: str = "") -> str:
    """What a removal did, and to which jobs, in words."""
    text = result.done
    if result.stoppedJobs:
        text += (f"; stopped {_jobs(result.stoppedJobs)} (waiting ones at once, running ones after "
                 "their grace period)")
    if result.keptJobs:
        several = len(result.keptJobs) > 1
        text += f"; {_jobs(result.keptJobs)} {'go' if several else 'goes'} on"
        text += kept_hint.replace("THEM", "them" if several else "it")
    return text


def cmd_user(client: Client, args: argparse.Namespace) -> int:
    result: BaseModel | Sequence[BaseModel]
    if args.action == "create":
        user = client.create_user(args.name, admin=args.admin)
        result, text = user, f"created user {user.name}" + (" (admin)" if user.admin else "")
    elif args.action == "disable":
        removed = client.disable_user(args.name, stop_jobs=args.stop_jobs)
        result = removed
        text = (removal_text(removed, kept_hint=f" (`yard user disable {args.name} --stop-jobs` stops THEM)")
                + f"; {args.name}'s tokens are refused until `yard user enable {args.name}`")
    elif args.action == "enable":
        result = client.enable_user(args.name)
        text = f"enabled user {args.name}: their tokens work again"
    elif args.action == "passwd":
        result, text = _passwd(client, args)
    elif args.action == "delete":
        removed = client.delete_user(args.name, force=args.force)
        result = removed
        text = (removal_text(removed) + f"; {args.name}'s tokens are revoked and their groups, grants and "
                "quotas removed; their jobs' history keeps their name, which is not reused")
    else:
        users = client.users()
        result = users
        text = render.table(["NAME", "ADMIN", "STATE", "CREATED"],
                            [[u.name, "yes" if u.admin else "no", "disabled" if u.disabled else "active",
                              render.when(u.createdAt)] for u in users])
    render.print_json(result) if args.json else print(text)
    return 0


def _passwd(client: Client, args: argparse.Namespace) -> tuple[BaseModel, str]:
    """``yard user passwd [NAME]``: your own password (asking the current one if you have
    one), or, for an admin, anyone's; ``--clear`` removes it."""
    if args.clear:
        if not args.name:
            raise UsageError("--clear needs the user's name: `yard user passwd NAME --clear` (admin)")
        user = client.clear_password(args.name)
        return user, f"removed {user.name}'s password: they sign in with a token; their browser sessions ended"
    me = client.me()
    name = args.name or me.name
    needs_current = name == me.name and me.hasPassword
    if args.password_stdin:
        # One line: the new password; changing your own existing one: the current, then the new.
        lines = sys.stdin.read().splitlines()
        want = 2 if needs_current else 1
        if len(lines) < want:
            raise UsageError("--password-stdin reads the new password from one line"
                             + ("; you have a password: give the current one on the line before it"
                                if needs_current else ""))
        current, new = (lines[0], lines[1]) if needs_current else (None, lines[0])
    else:
        if not sys.stdin.isatty():
            raise UsageError("not on a terminal: give the password with --password-stdin")
        current = getpass.getpass("Current password: ") if needs_current else None
        new = getpass.getpass(f"New password for {name}: ")
        if getpass.getpass("Again: ") != new:
            raise UsageError("the two passwords differ; nothing was changed")
    user = client.set_password(name, new, current=current)
    return user, f"password of {user.name} set: sign in to the portal with it; their browser sessions ended"


def cmd_token(client: Client, args: argparse.Namespace) -> int:
    if args.action == "create":
        created = client.create_token(user=args.user, name=args.name)
        if args.json:
            render.print_json(created)
            hint = private_file_hint(sys.stdout)
            if hint:
                print(f"yard: {hint}", file=sys.stderr)
        else:
            print(f"token for {created.user} (shown once; store it safely):\n{created.token}")
        return 0
    if args.action == "revoke":
        token = client.revoke_token(args.id)
        text = f"revoked token {token.id} of {token.user} ({token.prefix}…): it is refused from now on"
        render.print_json(token) if args.json else print(text)
        return 0
    tokens = client.tokens(user=args.user, every_user=args.all)
    if args.json:
        render.print_json(tokens)
    elif not tokens:
        print("no tokens")
    else:
        print(render.table(["ID", "USER", "NAME", "PREFIX", "CREATED", "LAST USED"],
                           [[t.id, t.user, t.name or "-", t.prefix + "…", render.when(t.createdAt),
                             render.when(t.lastUsedAt)] for t in tokens]))
    return 0


def private_file_hint(stream: IO[str]) -> str | None:
    """A warning for a token about to be written to ``stream``: the file's mode if others
    may read it, a general hint where it is no file (a terminal, a pipe); None for a
    private file."""
    try:
        info = os.fstat(stream.fileno())
    except (OSError, ValueError):  # no file behind it (a test's capture)
        return TOKEN_FILE_HINT
    if not stat.S_ISREG(info.st_mode):  # a terminal or a pipe: where it ends up is not known here
        return TOKEN_FILE_HINT
    if info.st_mode & 0o077:
        return (f"the file the token goes to can be read by others (mode {stat.S_IMODE(info.st_mode):04o}): "
                "`chmod 600` it; " + TOKEN_FILE_HINT)
    return None


def _quota_text(vc: VcView, alone: bool) -> str:
    text = ", ".join(f"{gpus} × {'any' if model == ANY_MODEL else model}" for model, gpus in sorted(vc.quota.items()))
    if vc.name == DEFAULT_VC:  # its quota is what no other VC guarantees
        return "everything" if alone else f"the rest: {text or 'none'}"
    return text or "none"


def _borrowed_text(vc: VcView) -> str:
    """GPUs its guaranteed jobs borrow beyond the quota, of the limit when there is one: ``2/4``."""
    return render.num(vc.borrowed) + ("" if vc.borrowLimit is None else f"/{vc.borrowLimit}")


def _borrowing_text(vc: VcView) -> str:
    borrow = "borrows with no limit" if vc.borrowLimit is None else f"borrows at most {vc.borrowLimit}"
    lend = "lends all its unused quota" if vc.lendLimit is None else f"lends at most {vc.lendLimit}"
    return f"{borrow}, {lend} (GPUs of each model); weight {render.num(vc.weight)}"


def vcs_table(vcs: Sequence[VcView]) -> str:
    rows = [
        [v.name, _quota_text(v, len(vcs) == 1), render.num(v.used), _borrowed_text(v), render.num(v.opportunistic),
         render.num(v.weight), "all" if v.lendLimit is None else v.lendLimit,
         v.waiting, "yes" if v.priorityPreemption else "no", v.gpuSharing,
         ", ".join(v.users + ["@" + g for g in v.groups]) or "-"]
        for v in vcs
    ]
    return render.table(["VC", "QUOTA (GPUs)", "USED", "BORROWED", "OPPO", "WEIGHT", "LENDS", "WAITING",
                         "PREEMPTION", "GPU SHARING", "WHO"], rows)


def cmd_vc(client: Client, args: argparse.Namespace) -> int:
    result: BaseModel | Sequence[BaseModel]
    if args.action == "list":
        vcs = client.vcs()
        result, text = vcs, vcs_table(vcs)
    elif args.action == "create":
        vc = client.create_vc(args.name, gpus=args.gpus, model=args.model,
                              priority_preemption=not args.no_priority_preemption, gpu_sharing=args.gpu_sharing,
                              borrow_limit=args.borrow_limit, lend_limit=args.lend_limit, weight=args.weight)
        result, text = vc, f"created virtual cluster {args.name}: {_quota_text(vc, False)}"
    elif args.action == "borrowing":
        changes = {key: getattr(args, key) for key in ("borrow_limit", "lend_limit", "weight") if key in args}
        if not changes:
            raise UsageError("give at least one of --borrow-limit, --lend-limit and --weight; "
                             "`yard vc list` shows what is set")
        vc = client.set_vc_borrowing(args.name, **changes)
        result, text = vc, f"virtual cluster {args.name}: {_borrowing_text(vc)}"
    elif args.action == "sharing":
        result = client.set_vc_sharing(args.name, args.rule)
        text = f"virtual cluster {args.name}: GPUs shared with {args.rule}"
    elif args.action == "grant":
        result = client.grant_vc(args.name, args.grantee)
        text = f"{args.grantee} may now submit to {args.name}"
    elif args.action == "revoke":
        removed = client.revoke_grant(args.name, args.grantee, force=args.force)
        result, text = removed, removal_text(removed)
    elif args.action == "delete":
        removed = client.delete_vc(args.name, force=args.force)
        result, text = removed, removal_text(removed)
    else:
        vc = client.set_vc_quota(args.name, gpus=args.gpus, model=args.model)
        result, text = vc, f"virtual cluster {args.name}: {_quota_text(vc, False)}"
    render.print_json(result) if args.json else print(text)
    return 0


def cmd_group(client: Client, args: argparse.Namespace) -> int:
    result: BaseModel | Sequence[BaseModel]
    if args.action == "create":
        result = client.create_group(args.name)
        text = f"created group {args.name}"
    elif args.action == "add":
        result = client.add_member(args.name, args.user)
        text = f"{args.user} is now in group {args.name}"
    elif args.action == "remove":
        removed = client.remove_member(args.name, args.user, force=args.force)
        result, text = removed, removal_text(removed)
    else:
        groups = client.groups()
        result, text = groups, render.table(["GROUP", "MEMBERS"], [[g.name, ", ".join(g.members) or "-"]
                                                                   for g in groups])
    render.print_json(result) if args.json else print(text)
    return 0


def cmd_quota(client: Client, args: argparse.Namespace) -> int:
    if args.action == "set":
        result = client.set_quota(args.user, priority=args.priority, gpus=args.gpus)
        unit = "GPU" if args.gpus == 1 else "GPUs"
        text = (f"{args.user} may hold at most {render.num(args.gpus)} {unit} at {args.priority}"
                if args.gpus is not None else f"{args.user} has no limit at {args.priority}")
    else:
        result = client.quotas()
        text = render.table(["USER", "PRIORITY", "MAX GPUS"],
                            [[q.user, q.priority, render.num(q.gpus)] for q in result])
    render.print_json(result) if args.json else print(text)
    return 0


def cmd_image(client: Client, args: argparse.Namespace) -> int:
    if args.action == "pull":
        pulls = client.pull_image(args.image, node=args.node)
        if args.json:
            render.print_json(pulls)
        else:
            for pull in pulls:
                print(pull.message)
        return EXIT_ERROR if any(p.error for p in pulls) else 0
    if args.action == "evict":
        removals = client.remove_image(args.image, node=args.node)
        if args.json:
            render.print_json(removals)
        else:
            for removal in removals:
                print(removal.message)
        return EXIT_ERROR if any(r.error for r in removals) else 0
    images = client.images()
    if args.json:
        render.print_json(images)
    elif not images:
        print("no images on any node")
    else:
        print(render.table(["NODE", "IMAGE", "ID", "SIZE", "CREATED", "PULLED AT"],
                           [[i.node, i.image, i.id, render.size(i.sizeBytes), render.when(i.createdAt),
                             render.when(i.pulledAt)] for i in images]))
    return 0


def cmd_node(client: Client, args: argparse.Namespace) -> int:
    if args.action == "label":
        return _label_node(client, args)
    node = client.cordon(args.name, cordoned=args.action == "cordon")
    state = "cordoned: nothing new is placed there" if node.cordoned else "schedulable again"
    render.print_json(node) if args.json else print(f"node {node.name}: {state}")
    return 0


def _label_node(client: Client, args: argparse.Namespace) -> int:
    try:
        changes = parse_label_arguments(args.changes)
    except ValueError as error:
        raise UsageError(str(error)) from None
    node = client.label_node(args.name, changes)
    if args.json:
        render.print_json(node)
    else:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(node.labels.items())) or "none"
        print(f"node {node.name}: labels {shown}")
    return 0
