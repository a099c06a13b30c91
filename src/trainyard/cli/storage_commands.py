"""``yard storage``: storages jobs mount (create, grant, revoke, delete: admin; list, show: anyone).
Its parser is in ``cli.main``, which imports nothing heavy."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from pydantic import BaseModel

from trainyard.cli import render
from trainyard.cli.admin_commands import removal_text
from trainyard.client import Client
from trainyard.schemas.storages import StorageView


def _grants(view: StorageView) -> str:
    return ", ".join(g.grantee + (" (ro)" if g.readOnly else "") for g in view.grants) or "-"


def storages_table(views: Sequence[StorageView]) -> str:
    rows = [[v.name, v.path, "ro" if v.readOnly else "rw", v.kind or "-", v.access, _grants(v)] for v in views]
    return render.table(["STORAGE", "PATH", "MODE", "KIND", "YOUR ACCESS", "GRANTS"], rows)


def storage_text(view: StorageView) -> str:
    lines = [f"storage {view.name}" + (" (built in)" if view.builtin else ""),
             f"  path:        {view.path}",
             f"  mode:        {'read-only for every job' if view.readOnly else 'read-write'}",
             f"  kind:        {view.kind or '-'}",
             f"  your access: {view.access}",
             f"  grants:      {_grants(view)}"]
    if view.description:
        lines.insert(1, f"  {view.description}")
    lines += [f"  note:        {note}" for note in view.notes]
    return "\n".join(lines)


def cmd_storage(client: Client, args: argparse.Namespace) -> int:
    result: BaseModel | Sequence[BaseModel]
    grantee = ("@" + args.group if args.group else args.user) if args.action in ("grant", "revoke") else ""
    if args.action == "create":
        view = client.create_storage(args.name, args.path, read_only=args.read_only, kind=args.kind,
                                     description=args.description)
        text = f"created storage {view.name} at {view.path}" + (" (read-only)" if view.readOnly else "")
        result, text = view, "\n".join([text, *(f"note: {note}" for note in view.notes)])
    elif args.action == "show":
        view = client.storage(args.name)
        result, text = view, storage_text(view)
    elif args.action == "grant":
        view = client.grant_storage(args.name, grantee, read_only=args.read_only)
        how = "read-only" if args.read_only or view.readOnly else "read-write"
        result, text = view, f"{grantee} may now mount storage {args.name} ({how})"
    elif args.action == "revoke":
        removed = client.revoke_storage(args.name, grantee, force=args.force)
        result, text = removed, removal_text(removed)
    elif args.action == "delete":
        removed = client.delete_storage(args.name, force=args.force)
        result, text = removed, removal_text(removed)
    else:
        views = client.storages()
        result, text = views, storages_table(views) if views else "no storages you may mount"
    render.print_json(result) if args.json else print(text)
    return 0
