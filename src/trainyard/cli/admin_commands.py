"""``yard vc``, ``yard group``, ``yard quota`` and ``yard node``: cluster administration."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pydantic import BaseModel

from trainyard.cli import render
from trainyard.client import Client
from trainyard.core.names import ANY_MODEL, DEFAULT_VC
from trainyard.schemas.admin import VcView


def _quota_text(vc: VcView, alone: bool) -> str:
    text = ", ".join(f"{gpus} × {'any' if model == ANY_MODEL else model}" for model, gpus in sorted(vc.quota.items()))
    if vc.name == DEFAULT_VC:  # its quota is what no other VC guarantees
        return "everything" if alone else f"the rest: {text or 'none'}"
    return text or "none"


def vcs_table(vcs: Sequence[VcView]) -> str:
    rows = [
        [v.name, _quota_text(v, len(vcs) == 1), render.num(v.used), render.num(v.borrowed), v.waiting,
         "yes" if v.priorityPreemption else "no", ", ".join(v.users + ["@" + g for g in v.groups]) or "-"]
        for v in vcs
    ]
    return render.table(["VC", "QUOTA (GPUs)", "USED", "BORROWED", "WAITING", "PREEMPTION", "WHO"], rows)


def cmd_vc(client: Client, args: argparse.Namespace) -> int:
    result: BaseModel | Sequence[BaseModel]
    if args.action == "list":
        vcs = client.vcs()
        result, text = vcs, vcs_table(vcs)
    elif args.action == "create":
        vc = client.create_vc(args.name, gpus=args.gpus, model=args.model,
                              priority_preemption=not args.no_priority_preemption)
        result, text = vc, f"created virtual cluster {args.name}: {_quota_text(vc, False)}"
    elif args.action == "grant":
        result = client.grant_vc(args.name, args.grantee)
        text = f"{args.grantee} may now submit to {args.name}"
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


def cmd_node(client: Client, args: argparse.Namespace) -> int:
    node = client.cordon(args.name, cordoned=args.action == "cordon")
    state = "cordoned: nothing new is placed there" if node.cordoned else "schedulable again"
    render.print_json(node) if args.json else print(f"node {node.name}: {state}")
    return 0
