"""The client-side ``yard`` commands: each talks to the server only through the SDK, and
shows what the server answered rather than working it out again."""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from trainyard.cli import plain, render
from trainyard.cli.exits import EXIT_AUTH, EXIT_ERROR, EXIT_TIMEOUT, EXIT_UNREACHABLE, EXIT_USAGE
from trainyard.cli.main import JOBS_PER_PAGE
from trainyard.client import (
    DEFAULT_RETRY_FOR,
    AuthError,
    Client,
    LogRead,
    ServerUnreachable,
    TrainyardError,
    UsageError,
    WaitTimeout,
)
from trainyard.client_config import load_config
from trainyard.core.states import FINAL_JOB_STATES, JobState

if TYPE_CHECKING:
    from trainyard.schemas.jobs import JobDetail, JobPage

# The other commands' modules (and the API models they read) are imported only when one of
# their commands runs: `yard jobs|job|logs|submit` load what they need and no more (issue 33).

FOLLOW_WAIT_POLL_SECONDS = 1.0  # how often `logs -f` asks whether a waiting job has started


def run_command(args: argparse.Namespace) -> int:
    config = load_config()
    try:
        with Client.from_config(config) as client:
            return handler(args.command)(client, args)
    except ServerUnreachable as exc:
        _fail(exc.message)
        return EXIT_UNREACHABLE
    except AuthError as exc:
        hint = "" if config.token else " (no token found: set TRAINYARD_TOKEN or run `yard up` to write client.json)"
        _fail(f"{exc.message}{hint}")
        return EXIT_AUTH
    except WaitTimeout as exc:
        _fail(exc.message)
        return EXIT_TIMEOUT
    except UsageError as exc:
        _fail(exc.message)
        return EXIT_USAGE
    except TrainyardError as exc:
        _fail(exc.message)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130


def _fail(message: str) -> None:
    print(f"yard: {message}", file=sys.stderr)


def _say_retrying(error: TrainyardError, pause: float) -> None:
    """What `yard submit` and `yard clone` say before they send a submit again."""
    print(f"yard: no answer to the submit ({error.message}); sending it again in {pause:g} s with the same "
          "Idempotency-Key, so that it makes one job at most", file=sys.stderr)


def _read_job_file(name: str) -> tuple[bytes, str]:
    if name == "-":
        data = sys.stdin.buffer.read()
    else:
        path = Path(name)
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, "it is a folder, not a job file", name)
        data = path.read_bytes()
    content_type = "application/json" if name.endswith(".json") else "application/yaml"
    return data, content_type


def _workdir_to_send(args: argparse.Namespace, data: bytes) -> Path | None:
    """The folder `yard submit` sends with the job: --workdir; else the job file's own
    ``workdir`` (relative to the file); else the current folder when the job file is in it
    (a project folder); --no-workdir: none."""
    from trainyard.client_workdir import folder_for, names_upload  # packing: not for --help

    if args.no_workdir:
        return None
    if args.workdir is not None:
        return Path(args.workdir)
    if (named := folder_for(data if args.file == "-" else args.file, None)) is not None:
        return named
    if names_upload(data):
        return None  # the job file's own `workdir: sha256:…` (an exported job): it runs there
    if args.file != "-" and Path(args.file).resolve().parent == Path.cwd().resolve():
        return Path.cwd()
    return None


def _without_workdir(data: bytes, content_type: str) -> tuple[bytes, str]:
    """The job file without its own ``workdir`` path (an upload's digest stays: it sends nothing)."""
    from trainyard.client_workdir import may_name, names_upload

    if not may_name(data, "workdir") or names_upload(data):
        return data, content_type
    import json

    import yaml

    document = yaml.safe_load(data)
    if not isinstance(document, dict) or "workdir" not in document:
        return data, content_type
    return json.dumps({k: v for k, v in document.items() if k != "workdir"}).encode(), "application/json"


def _hint_workdir(args: argparse.Namespace, data: bytes) -> bool:
    """Whether a submit that sends nothing is of a job file in a folder below this one whose
    text names a file that is here but not beside it (``configs/job.yaml`` running
    ``python train.py``); a job that names none (``examples/hello-world.yaml``) needs no folder."""
    from trainyard.client_workdir import names_upload

    if args.no_workdir or args.file == "-" or names_upload(data):
        return False
    folder, here = Path(args.file).resolve().parent, Path.cwd().resolve()
    if folder == here or not folder.is_relative_to(here):
        return False
    import re

    text = b"\n".join(line for line in data[:65536].splitlines() if not line.lstrip().startswith(b"#"))
    names = {n.decode() for n in re.findall(rb"[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_.-]+)*", text)}
    job_file = Path(args.file).resolve()
    return any((here / name).is_file() and not (folder / name).exists() and (here / name).resolve() != job_file
               for name in sorted(names)[:2000] if "." in name and ".." not in name)


def cmd_submit(client: Client, args: argparse.Namespace) -> int:
    try:
        data, content_type = _read_job_file(args.file)
    except (FileNotFoundError, IsADirectoryError, PermissionError) as e:
        _fail(f"cannot read job file {args.file!r}: {e.strerror or e}")
        return EXIT_USAGE
    dependencies = _dependencies(args)
    if isinstance(dependencies, int):
        return dependencies
    if args.notify is not None:
        from trainyard.cli.account_commands import with_notify

        data, content_type = with_notify(data, content_type, args.notify)
    digest = None
    folder = _workdir_to_send(args, data)
    if args.no_workdir or (args.dry_run and folder is not None):
        # The job file's own `workdir: src` is settled here (not sent, or checked without
        # sending): the server, and the SDK below, must not see the path.
        data, content_type = _without_workdir(data, content_type)
    if folder is not None:
        from trainyard.client_workdir import packed, send  # `client.upload_workdir`, answers read by cli/plain.py

        def read(model: Any, answer: bytes) -> Any:
            return plain.read_or_parse(client, model.where, answer, many=model.many)

        if args.dry_run:  # checked here, not sent: a dry run makes nothing, an upload neither
            archive = packed(client, folder.expanduser(), read=read)
            files, size, said = archive.files, archive.size, f"{archive.digest[:19]}; not sent: a dry run"
        else:
            sent = send(client, folder.expanduser(), read=read)
            files, size, said = sent.files, sent.sizeBytes, sent.digest[:19]
            digest = sent.digest
        shown = "./" if folder.resolve() == Path.cwd().resolve() else str(folder)
        print(f"working directory {shown}: {render.plural(files, 'file')}, {render.size(size)} ({said})",
              file=sys.stderr)
    elif _hint_workdir(args, data):
        # A project's job file in a folder of its own (configs/job.yaml): nothing is sent, which
        # a first job's "can't open file 'train.py'" says too late.
        print(f"no working directory sent: the job file is in {Path(args.file).parent}/, not in this folder; "
              "to send this folder with the job: --workdir .", file=sys.stderr)
    from trainyard.client_workdir import may_name

    if args.sweep or args.parallel is not None or may_name(data, "sweep"):  # else no PyYAML to import
        from trainyard.cli import sweep_commands  # reads the file for a sweep section

        if (made := sweep_commands.submit(client, args, data, workdir=digest)) is not None:
            return made  # the file (or --sweep) makes a sweep
    answer = client._submit_answer(data, content_type=content_type, dry_run=args.dry_run, dependencies=dependencies,
                                   idempotency_key=args.idempotency_key, on_retry=_say_retrying, workdir=digest)
    if args.json or args.dry_run:  # the answer through the models, as `Client.submit` gives it
        from trainyard.client_models import Model

        result: Any = client._parse(Model("jobs.DryRunResult" if args.dry_run else "jobs.SubmitResult"), answer)
        if args.json:
            render.print_json(result)
            return 0
    else:  # read from the JSON as it came (cli/plain.py: no pydantic to import)
        try:
            result = plain.submitted(answer)
        except ValueError:
            from trainyard.client_models import Model

            result = client._parse(Model("jobs.SubmitResult"), answer)
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if args.dry_run:
        import yaml

        print("# valid; the job as Trainyard will run it (secrets masked):")
        print(yaml.safe_dump(result.job, sort_keys=False), end="")
        for role, image in result.images.items():  # a short name in full, as it is pulled
            print(f"# role {role} runs in image {image}")
    else:
        print(f"submitted job {result.id} ({result.name}): {result.state}")
    return 0


def _dependencies(args: argparse.Namespace) -> str | int | None:
    """``yard submit``'s --after-ok/--after-any/--after-notok and --dependency as Slurm's text
    (None: none given; EXIT_USAGE, said on stderr, for an id that is not one)."""
    parts = [args.dependency] if args.dependency else []
    for condition in ("afterok", "afterany", "afternotok"):
        ids = [i.strip() for value in getattr(args, condition) for i in value.split(",") if i.strip()]
        bad = [i for i in ids if not i.isdigit()]
        if bad:
            _fail(f"--{condition.replace('after', 'after-')} takes job ids, like 12 or 12,13 (got {bad[0]!r})")
            return EXIT_USAGE
        if ids:
            parts.append(":".join([condition, *ids]))
    return ",".join(parts) or None


def cmd_jobs(client: Client, args: argparse.Namespace) -> int:
    filters = {"state": args.state, "user": args.user, "vc": args.vc, "name": args.name, "limit": args.limit,
               "before": args.before}
    if args.json:
        render.print_json(client.jobs(**filters))
        return 0
    # The table is read from the JSON as it came (cli/plain.py: no pydantic to import); an
    # answer it does not expect is read with the models, which say what is wrong with it.
    answer = client._jobs_answer(**filters)
    try:
        items, following = plain.job_page(answer)
    except ValueError:
        from trainyard.client_models import Model

        page: JobPage = client._parse(Model("jobs.JobPage"), answer)
        items, following = list(page.items), page.next
    print(render.jobs_table(items) if items else "no jobs")
    if following is not None:
        print(f"(more: {_next_page_command(args, following)})")
    return 0


def _next_page_command(args: argparse.Namespace, cursor: int) -> str:
    """The `yard jobs` that shows the next page: the same filters and page size, and the cursor."""
    argv = ["yard", "jobs"]
    for flag, value in (("--state", args.state), ("--user", args.user), ("--vc", args.vc), ("--name", args.name)):
        if value is not None:
            argv += [flag, value]
    if args.limit != JOBS_PER_PAGE:
        argv += ["--limit", str(args.limit)]
    return shlex.join([*argv, "--before", str(cursor)])


def cmd_job(client: Client, args: argparse.Namespace) -> int:
    if args.metrics:
        from trainyard.cli.history_render import job_metrics_text

        metrics = client.job_metrics(args.id, since=args.since, until=args.until, task=args.task)
        render.print_json(metrics) if args.json else print(job_metrics_text(metrics))
        return 0
    if args.since or args.until or args.task:
        _fail("--since, --until and --task go with --metrics")
        return EXIT_USAGE
    if args.json:
        render.print_json(client.job(args.id))
        return 0
    # The job, its notices and its usage are read from the JSON as it came (cli/plain.py: no
    # pydantic to import); an answer it does not expect is read with the models.
    job: JobDetail = plain.read_or_parse(client, "jobs.JobDetail", client._job_answer(args.id))
    print(render.job_detail(job))
    if notices := plain.read_or_parse(client, "notices.JobNoticeView", client._job_notices_answer(args.id),
                                      many=True):
        from trainyard.cli.account_commands import notices_text

        print(notices_text(notices))
    from trainyard.cli.usage_commands import job_efficiency

    if job.state in FINAL_JOB_STATES and (efficiency := job_efficiency(client, job)):
        print(efficiency)
    return 0


def cmd_logs(client: Client, args: argparse.Namespace) -> int:
    out = sys.stdout.buffer
    if args.follow and args.limit_bytes is not None:
        _fail("--limit-bytes caps a printed log; it does not go with --follow (use --tail N to start near the end)")
        return EXIT_USAGE
    earlier = args.run is not None or args.previous
    if earlier and (args.follow or args.all_tasks):
        _fail(f"{'--run' if args.run is not None else '--previous'} reads an earlier run of one task, which has "
              "ended: not with " + ("--follow" if args.follow else "--all"))
        return EXIT_USAGE
    if args.all_tasks:
        return _all_logs(client, args, out)
    if args.follow:
        placed = _wait_to_follow(client, args)
        if placed.task is None:  # the job ended before this attempt ran: nothing to follow
            _note_on_logs(client, args, placed)
            return 0
        for chunk in client.follow_logs(args.id, task=args.task, attempt=args.attempt, tail=args.tail):
            out.write(chunk)
            out.flush()
        return 0
    # Page by page, each written as it comes: a log of any size, never all of it in memory.
    pages = client.iter_logs(args.id, task=args.task, attempt=args.attempt, tail=args.tail,
                             limit_bytes=args.limit_bytes, run=args.run, previous=args.previous)
    first = last = next(pages)
    out.write(first.data)
    for last in pages:
        out.write(last.data)
    out.flush()
    if last.end < last.size:  # only --limit-bytes stops short of the log's end
        _fail(f"output cut at --limit-bytes {args.limit_bytes}: the log has {last.size - last.end} more bytes "
              f"(to byte {last.size}); leave out --limit-bytes for all of it")
    _note_on_logs(client, args, first)
    return 0


def _all_logs(client: Client, args: argparse.Namespace, out: BinaryIO) -> int:
    """``yard logs ID --all [-f]``: every task's log, prefixed, as the server merges them."""
    if args.limit_bytes is not None:
        _fail("--limit-bytes caps one task's log; with --all use --tail N (the last N lines of each task)")
        return EXIT_USAGE
    if args.follow:
        job = client.job(args.id)
        if job.state == JobState.WAITING:
            why = render.job_status_text(job) or "not placed yet"
            _fail(f"job {args.id} is waiting ({why}); its tasks' logs follow once they start (Ctrl-C to stop waiting)")
    wrote = False
    for chunk in client.all_logs(args.id, attempt=args.attempt, tail=args.tail, follow=args.follow):
        out.write(chunk)
        out.flush()
        wrote = wrote or bool(chunk)
    if not wrote and not args.follow:
        job = client.job(args.id)
        if not any(a.startedAt for a in job.attempts):
            _fail(f"job {args.id} is {job.state}: no task has run yet")
    return 0


def _wait_to_follow(client: Client, args: argparse.Namespace) -> LogRead:
    """While the task to follow is not placed yet, say so on stderr with why the job waits (again
    when that changes), polling; then the server streams its log. Returns the last read (no
    bytes): ``task`` is None if the job ended without running the attempt."""
    said = ""
    while True:
        placed = client.read_log(args.id, task=args.task, attempt=args.attempt, limit=0)
        if placed.task is not None:
            if said:
                _fail(f"job {args.id} started; following task {placed.task}")
            return placed
        job = client.job(args.id)
        if job.state.is_final:
            return placed
        why = render.job_status_text(job) or "not placed yet"
        if job.state == JobState.WAITING and why != said:
            _fail(f"job {args.id} is waiting ({why}); its log follows once it starts (Ctrl-C to stop waiting)")
            said = why
        time.sleep(FOLLOW_WAIT_POLL_SECONDS)


def _note_on_logs(client: Client, args: argparse.Namespace, log: LogRead) -> None:
    """On stderr, what the log shown leaves out: that nothing ran yet, or the other tasks."""
    from trainyard.client_models import Model

    answer = client._job_answer(args.id)
    if log.run and args.run is None and not args.previous:  # re-run in place, restarted by a resize
        _fail(f"showed run {log.run} of task {log.task} in attempt {log.attempt}; its earlier runs: --previous, "
              f"--run {'0' if log.run == 1 else f'0..{log.run - 1}'}")
    if log.task is not None:  # the server names the task it showed once the task was placed
        if args.task is None:  # it chose the task (log.task), and the others are these
            try:  # read from the JSON as it came (cli/plain.py: no pydantic to import)
                tasks = plain.task_labels(answer)
            except ValueError:
                shown: JobDetail = client._parse(Model("jobs.JobDetail"), answer)
                tasks = shown.task_labels()
            if len(tasks) > 1:
                others = ", ".join(t for t in tasks if t != log.task)
                _fail(f"showed task {log.task} of {len(tasks)}; the others: --task {others} (every task: --all)")
        return
    job: JobDetail = client._parse(Model("jobs.JobDetail"), answer)  # nothing ran yet: why, from the models
    ran = [a.number for a in job.attempts if a.startedAt]
    number = job.attempt if args.attempt is None else args.attempt
    if args.task is not None and number in ran:  # the attempt ran, without this task (an elastic worker)
        labels = ", ".join(job.task_labels())
        _fail(f"task {args.task} has not run in attempt {number} of job {args.id}; its tasks: --task {labels}")
        return
    earlier = f"; earlier attempts: --attempt {', '.join(map(str, ran))}" if ran and args.attempt is None else ""
    why = f" ({render.job_status_text(job)})" if job.state == JobState.WAITING and job.pending else ""
    _fail(f"job {args.id} is {job.state}{why}: this attempt has not run yet{earlier}")


def cmd_stop(client: Client, args: argparse.Namespace) -> int:
    from trainyard.cli import bulk

    if len(args.ids) != 1 or bulk.has_filters(args):
        return bulk.bulk(client, args, "stop", lambda job_id: client.stop(job_id, reason=args.reason), _stopped)
    job = client.stop(args.ids[0], reason=args.reason)
    render.print_json(job) if args.json else print(_stopped(job))
    return 0


def _stopped(job: JobDetail) -> str:
    return f"job {job.id}: {job.state}"


def cmd_suspend(client: Client, args: argparse.Namespace) -> int:
    from trainyard.cli import bulk

    if len(args.ids) != 1 or bulk.has_filters(args):
        return bulk.bulk(client, args, "suspend", client.suspend, _suspended)
    job = client.suspend(args.ids[0])
    render.print_json(job) if args.json else print(_suspended(job))
    return 0


def _suspended(job: JobDetail) -> str:
    if job.state == JobState.RUNNING:
        return (f"job {job.id}: suspending (its tasks save their state; `yard job {job.id}` follows it; "
                f"`yard resume {job.id}` lets it run again)")
    return f"job {job.id}: {job.state}, held until `yard resume {job.id}`"


def cmd_resume(client: Client, args: argparse.Namespace) -> int:
    from trainyard.cli import bulk

    if len(args.ids) != 1 or bulk.has_filters(args):
        return bulk.bulk(client, args, "resume", client.resume, _resumed)
    job = client.resume(args.ids[0])
    render.print_json(job) if args.json else print(_resumed(job))
    return 0


def _resumed(job: JobDetail) -> str:
    return f"job {job.id}: {job.state}; {job.message}"


def cmd_clone(client: Client, args: argparse.Namespace) -> int:
    job_file: bytes | Path | None = None  # a path is read by the SDK, which also takes .json for JSON
    edited: Path | None = None
    if args.file is not None:
        job_file = sys.stdin.buffer.read() if args.file == "-" else Path(args.file)
    elif args.edit:
        edited = _edit_shown_job(client, args.id)
        if edited is None:
            return EXIT_ERROR
        job_file = edited.read_bytes()
        if not job_file.strip():
            _fail("the job file was left empty: nothing submitted")
            edited.unlink()
            return EXIT_ERROR
    try:
        result = client.clone(args.id, job_file=job_file, name=args.name, vc=args.vc, priority=args.priority,
                              idempotency_key=args.idempotency_key, on_retry=_say_retrying)
    except TrainyardError:
        if edited is not None:
            again = shlex.join(["yard", "clone", str(args.id), "--file", str(edited)])
            _fail(f"your edit is kept in {edited}; fix it, then: {again}")
        raise
    if edited is not None:
        edited.unlink()
    if args.json:
        render.print_json(result)
        return 0
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    print(f"submitted job {result.id} ({result.name}), a clone of job {args.id}: {result.state}")
    return 0


def _edit_shown_job(client: Client, job_id: int) -> Path | None:
    """Open the user's editor on the job as the server shows it; the file it left, or None
    if the editor failed (said on stderr)."""
    shown = client.job(job_id).spec
    import subprocess
    import tempfile

    import yaml

    fd, name = tempfile.mkstemp(prefix=f"yard-clone-{job_id}-", suffix=".yaml")  # mode 0600
    path = Path(name)
    with os.fdopen(fd, "w") as file:
        file.write(f"# Job {job_id} as Trainyard shows it, secrets masked as ******: a value left masked keeps\n"
                   "# the original's. Save and quit to submit the copy; empty the file to submit nothing.\n")
        yaml.safe_dump(shown, file, sort_keys=False, allow_unicode=True)
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    try:
        finished = subprocess.run([*shlex.split(editor), str(path)], check=False)
    except (OSError, ValueError) as exc:
        _fail(f"cannot run the editor {editor!r} ({exc}); set $EDITOR, or use --file")
        path.unlink()
        return None
    if finished.returncode != 0:
        _fail(f"the editor {editor!r} exited with status {finished.returncode}: nothing submitted")
        path.unlink()
        return None
    return path


def cmd_wait(client: Client, args: argparse.Namespace) -> int:
    def retrying(error: TrainyardError, pause: float) -> None:
        _fail(f"{error.message} (asking again in {pause:.2g} s, for up to --retry-for {retry_for:g} s)")

    retry_for = DEFAULT_RETRY_FOR if args.retry_for is None else args.retry_for
    job = client.wait(args.id, timeout=args.timeout, retry_for=retry_for, on_retry=retrying)
    if args.json:
        render.print_json(job)
    else:
        print(f"job {job.id}: {job.state}" + (f" ({job.message})" if job.message else ""))
    return 0 if job.state == JobState.SUCCEEDED else EXIT_ERROR


def cmd_nodes(client: Client, args: argparse.Namespace) -> int:
    nodes = client.nodes()
    render.print_json(nodes) if args.json else print(render.nodes_table(nodes))
    return 0


def cmd_whoami(client: Client, args: argparse.Namespace) -> int:
    me = client.me()
    render.print_json(me) if args.json else print(me.name + (" (admin)" if me.admin else ""))
    return 0


# Each command's handler, as "module:function" (a module of trainyard.cli; "" this one),
# imported when the command runs.
HANDLERS: dict[str, str] = {
    "submit": ":cmd_submit",
    "jobs": ":cmd_jobs",
    "clone": ":cmd_clone",
    "job": ":cmd_job",
    "logs": ":cmd_logs",
    "ls": "files_commands:cmd_ls",
    "cp": "files_commands:cmd_cp",
    "port-forward": "forward:cmd_port_forward",
    "exec": "execshell:cmd_exec",
    "shell": "execshell:cmd_shell",
    "stop": ":cmd_stop",
    "suspend": ":cmd_suspend",
    "resume": ":cmd_resume",
    "wait": ":cmd_wait",
    "nodes": ":cmd_nodes",
    "top": "top:cmd_top",
    "user": "admin_commands:cmd_user",
    "token": "admin_commands:cmd_token",
    "whoami": ":cmd_whoami",
    "vc": "admin_commands:cmd_vc",
    "group": "admin_commands:cmd_group",
    "quota": "admin_commands:cmd_quota",
    "node": "admin_commands:cmd_node",
    "image": "admin_commands:cmd_image",
    "storage": "storage_commands:cmd_storage",
    "dataset": "dataset_commands:cmd_dataset",
    "sweep": "sweep_commands:cmd_sweep",
    "alerts": "alert_commands:cmd_alerts",
    "account": "account_commands:cmd_account",
    "usage": "usage_commands:cmd_usage",
    "env": "env_commands:cmd_env",
    "dev": "dev_commands:cmd_dev",
}


def handler(command: str) -> Callable[[Client, argparse.Namespace], int]:
    """The function that runs ``command``, its module imported now."""
    module, _, name = HANDLERS[command].partition(":")
    found: Callable[[Client, argparse.Namespace], int] = getattr(
        importlib.import_module(f"trainyard.cli.{module}") if module else sys.modules[__name__], name)
    return found
