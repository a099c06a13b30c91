"""``yard dataset``: datasets jobs read from each node's cache (register, list, show, grant,
revoke, remove; ``cache``: what each node holds). Its parser is in ``cli.main``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from pydantic import BaseModel

from trainyard.cli import render
from trainyard.client import Client
from trainyard.schemas.datasets import DatasetView, NodeCacheView


def datasets_table(views: Sequence[DatasetView]) -> str:
    rows = [[v.name, v.version, v.owner, v.access, v.source] for v in views]
    return render.table(["DATASET", "VERSION", "OWNER", "ACCESS", "SOURCE"], rows)


def dataset_text(view: DatasetView) -> str:
    lines = [f"dataset {view.name}",
             f"  source:  {view.source}",
             f"  version: {view.version}" + (f" (sha256 {view.sha256})" if view.sha256 else ""),
             f"  owner:   {view.owner} (your access: {view.access})",
             f"  grants:  {', '.join(view.grants) or '-'}",
             f"  changed: {view.updatedAt:%Y-%m-%d %H:%M} UTC"]
    if view.description:
        lines.insert(1, f"  {view.description}")
    return "\n".join(lines)


def cache_text(caches: Sequence[NodeCacheView]) -> str:
    if not caches:
        return "no node keeps a dataset cache (the backend has none)"
    parts = []
    for cache in caches:
        parts.append(f"node {cache.node}: {render.size(cache.usedBytes)} of {render.size(cache.capacityBytes)}; "
                     f"{cache.hits} hits, {cache.misses} misses, {render.size(cache.bytesFetched)} fetched, "
                     f"{cache.evictions} evictions"
                     + (f", {cache.fetchFailures} failed fetches" if cache.fetchFailures else ""))
        rows = [[e.dataset, e.version, render.size(e.bytes), e.files, e.inUse,
                 f"{e.lastUsedAt:%Y-%m-%d %H:%M}" if e.lastUsedAt else "-"] for e in cache.entries]
        if rows:
            parts.append(render.table(["DATASET", "VERSION", "SIZE", "FILES", "IN USE", "LAST USED (UTC)"], rows))
    return "\n".join(parts)


def cmd_dataset(client: Client, args: argparse.Namespace) -> int:
    result: BaseModel | Sequence[BaseModel]
    grantee = ("@" + args.group if args.group else args.user) if args.action in ("grant", "revoke") else ""
    if args.action == "register":
        view = client.register_dataset(args.name, args.source, version=args.version, sha256=args.sha256,
                                       description=args.description)
        result, text = view, f"dataset {view.name} is {view.source} at version {view.version}"
    elif args.action == "show":
        view = client.dataset(args.name)
        result, text = view, dataset_text(view)
    elif args.action == "grant":
        result, text = client.grant_dataset(args.name, grantee), f"{grantee} may now read dataset {args.name}"
    elif args.action == "revoke":
        result = client.revoke_dataset(args.name, grantee, force=args.force)
        text = f"{grantee} may no longer read dataset {args.name}"
    elif args.action == "remove":
        removed = client.remove_dataset(args.name, force=args.force)
        if args.json:
            print(json.dumps({"removed": args.name, "stoppedJobs": removed.stoppedJobs}))
            return 0
        stopped = f"; stopped jobs {', '.join(map(str, removed.stoppedJobs))}" if removed.stoppedJobs else ""
        print(f"removed dataset {args.name} (nodes' cached copies go as their caches need room){stopped}")
        return 0
    elif args.action == "cache":
        caches = client.dataset_caches()
        result, text = caches, cache_text(caches)
    else:
        views = client.datasets()
        result, text = views, datasets_table(views) if views else "no datasets you may read"
    render.print_json(result) if args.json else print(text)
    return 0
