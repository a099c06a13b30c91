"""``yard ls`` and ``yard cp``: a job's files, from its directory or a task's working
directory, listed and downloaded. Its parsers are in ``cli.main``, which imports nothing heavy.

Every name comes from the job, so names are printed with their control characters escaped
(a name may hold a newline or a terminal's escape sequence)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from trainyard.cli import render
from trainyard.cli.exits import EXIT_ERROR, EXIT_USAGE
from trainyard.client import Client
from trainyard.schemas.files import FileEntry, FileListing


def job_path(text: str) -> tuple[int, str]:
    """``JOB[:PATH]`` as (job id, path); ValueError saying what to write."""
    job, _, path = text.partition(":")
    if not (job.isascii() and job.isdigit()) or int(job) < 1:
        raise ValueError(f"{text!r} is not JOB[:PATH] (e.g. 42:out/result.json)")
    return int(job), path


def shown(name: str) -> str:
    """A job's name as a terminal may print it: control characters escaped, as Python writes them."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)


def listing_table(listing: FileListing) -> str:
    rows = [[e.type, render.size(e.size) if e.type == "file" else "-", render.when(e.modifiedAt), _name(e)]
            for e in listing.entries]
    return render.table(["TYPE", "SIZE", "MODIFIED", "NAME"], rows)


def _name(entry: FileEntry) -> str:
    name = shown(entry.name) + ("/" if entry.type == "dir" else "")
    return f"{name} -> {shown(entry.target or '')}" if entry.type == "link" else name


def _where(listing: FileListing) -> str:
    where = "directory"
    if listing.task is not None:
        where = f"task {listing.task}'s working directory (attempt {listing.attempt})"
    return f"job {listing.job}'s {where}" + (f", {shown(listing.path)}/" if listing.path else "")


def cmd_ls(client: Client, args: argparse.Namespace) -> int:
    try:
        job_id, path = job_path(args.target)
    except ValueError as exc:
        print(f"yard: {exc}", file=sys.stderr)
        return EXIT_USAGE
    listing = client.files(job_id, path, task=args.task, attempt=args.attempt)
    if args.json:
        render.print_json(listing)
        return 0
    print(f"{_where(listing)}:")
    print(listing_table(listing) if listing.entries else "  (empty)")
    if listing.truncated:
        print(f"yard: the folder holds more than the {len(listing.entries) + listing.omitted} names shown",
              file=sys.stderr)
    if listing.omitted:
        print(f"yard: {listing.omitted} name(s) left out: not UTF-8", file=sys.stderr)
    return 0


def cmd_cp(client: Client, args: argparse.Namespace) -> int:
    try:
        return _cp(client, args)
    except OSError as exc:  # this machine's side: a folder missing, no right to write, a name too long
        print(f"yard: cannot write {shown(str(exc.filename or args.dest))}: {exc.strerror}", file=sys.stderr)
        return EXIT_ERROR


def _cp(client: Client, args: argparse.Namespace) -> int:
    try:
        job_id, path = job_path(args.source)
    except ValueError as exc:
        print(f"yard: {exc}", file=sys.stderr)
        return EXIT_USAGE
    path = path.rstrip("/")
    if args.recursive:
        if args.dest == "-":
            print("yard: -r copies a folder into a local folder, not to stdout", file=sys.stderr)
            return EXIT_USAGE
        return _copy_tree(client, args, job_id, path)
    if not path:
        print(f"yard: name the file to copy: {job_id}:PATH (`yard ls {job_id}` lists the job's directory; -r copies "
              "a folder)", file=sys.stderr)
        return EXIT_USAGE
    if args.dest == "-":
        out = sys.stdout.buffer
        for chunk in client.download(job_id, path, task=args.task, attempt=args.attempt):
            out.write(chunk)
        out.flush()
        return 0
    dest = Path(args.dest)
    if dest.is_dir():
        dest = dest / path.rsplit("/", 1)[-1]
    _copy_file(client, args, job_id, path, dest)
    return 0


def _copy_file(client: Client, args: argparse.Namespace, job_id: int, path: str, dest: Path) -> None:
    chunks = client.download(job_id, path, task=args.task, attempt=args.attempt)
    partial = dest.with_name(dest.name + ".part")
    # Written beside, then renamed: a download that breaks off leaves no half file under the name.
    try:
        with open(partial, "wb") as out_file:
            for chunk in chunks:
                out_file.write(chunk)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, dest)
    if not args.quiet:
        print(f"{shown(str(dest))} ({render.size(dest.stat().st_size)})", file=sys.stderr)


# What no file name holds here: a separator (Windows has two, and drive letters) or NUL.
_NOT_IN_A_NAME = "/\0" + ("\\:" if os.name == "nt" else "")


def _copy_tree(client: Client, args: argparse.Namespace, job_id: int, path: str) -> int:
    """``-r``: the folder ``path`` into ``args.dest`` (made), or into a folder of its name
    in ``args.dest`` when that exists, as ``cp -r`` does. Only files and folders are copied:
    links and the rest are named on stderr. An honest server's names are never ``.``, ``..``
    or hold a slash; a name that is (another server's, or one made on a system whose
    separator is ``\\``) is skipped, and nothing is written through a link already there, so
    every local path stays inside the destination."""
    dest = Path(args.dest)
    if dest.exists():
        dest = dest / (path.rsplit("/", 1)[-1] if path else f"job-{job_id}")
    pending, skipped = [(path, dest)], []
    while pending:
        folder, local = pending.pop()
        listing = client.files(job_id, folder, task=args.task, attempt=args.attempt)
        local.mkdir(exist_ok=True)
        if listing.truncated:
            skipped.append(f"{shown(folder) or '.'}/: only its first {len(listing.entries)} names")
        for entry in listing.entries:
            sub = f"{folder}/{entry.name}" if folder else entry.name
            if entry.name in ("", ".", "..") or any(c in entry.name for c in _NOT_IN_A_NAME) or \
                    (local / entry.name).is_symlink():
                skipped.append(f"{shown(sub)} (a name that is not a plain file name here, not copied)")
                continue
            if entry.type == "dir":
                pending.append((sub, local / entry.name))
            elif entry.type == "file":
                _copy_file(client, args, job_id, sub, local / entry.name)
            else:
                skipped.append(f"{shown(sub)} ({entry.type}, not copied)")
    for note in skipped:
        print(f"yard: skipped {note}", file=sys.stderr)
    return 0
