"""``yard``: the command line's parser and dispatch. Only argparse is imported up front so
``yard --help`` is instant; the exit codes are in ``exits.py``.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Sequence

from trainyard.cli.account_args import NOTIFY_HELP, add_account_parser, notify_on
from trainyard.cli.periods import moment
from trainyard.cli.sim_commands import add_sim_parser, run_sim
from trainyard.cli.sweep_parser import add_submit_sweep_flags, add_sweep_parser
from trainyard.core.priorities import PRIORITY_NAMES
from trainyard.core.sharing import GPU_SHARING_NAMES
from trainyard.core.states import FINAL_JOB_STATES, JobState

JOBS_PER_PAGE = 20  # `yard jobs` without --limit
TOP_INTERVAL_SECONDS = 2.0  # `yard top` without --interval


def _non_negative(text: str) -> int:
    """An argparse type: a whole number, 0 or more."""
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 0 or more")
    return int(text)


def _positive_seconds(text: str) -> float:
    """An argparse type: a number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


def _gpu_limit(text: str) -> int | None:
    """An argparse type: a whole number of GPUs, 0 or more, or ``none`` (no limit)."""
    if text.lower() == "none":
        return None
    if not (text.isascii() and text.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is neither a whole number of GPUs (0 or more) nor 'none'")
    return int(text)


def _weight(text: str) -> float:
    """An argparse type: a VC's weight, a number above 0 (the server checks the most)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number above 0")
    return value


def _borrowing_flags(q: argparse.ArgumentParser, *, keep: bool) -> None:
    """``--borrow-limit``, ``--lend-limit``, ``--weight``; with ``keep``, one not given is not
    in the namespace at all (the change leaves it as it is)."""
    default = argparse.SUPPRESS if keep else None
    q.add_argument("--borrow-limit", type=_gpu_limit, metavar="N|none", default=default,
                   help="whole GPUs of each model its jobs may hold beyond its quota on other VCs' idle GPUs "
                        "(none: no limit; 0: it never borrows)")
    q.add_argument("--lend-limit", type=_gpu_limit, metavar="N|none", default=default,
                   help="whole GPUs of each model of its unused quota other VCs may borrow "
                        "(none: all of them; 0: it never lends)")
    q.add_argument("--weight", type=_weight, metavar="W", default=argparse.SUPPRESS if keep else 1.0,
                   help="its share of idle GPUs against the other VCs that want them (default 1; at most 1000)")


# More jobs than this and `yard stop|suspend|resume` asks first (on a terminal; else --yes).
BULK_CONFIRM_OVER = 5
# What `yard stop|suspend|resume` filters select without --state: the jobs the action applies to.
BULK_DEFAULT_STATES: dict[str, tuple[JobState, ...]] = {
    "stop": tuple(s for s in JobState if s not in FINAL_JOB_STATES and s != JobState.STOPPING),
    "suspend": (JobState.WAITING, JobState.RUNNING),
    "resume": (JobState.SUSPENDED,),
}


def _bulk_selection(p: argparse.ArgumentParser, action: str) -> None:
    """The ids and filters `yard stop|suspend|resume` take (cli/bulk.py)."""
    default = ",".join(BULK_DEFAULT_STATES[action])
    p.add_argument("ids", type=int, nargs="*", metavar="ID",
                   help="the jobs (with filters: only those of them the filters select)")
    p.add_argument("--user", help="the jobs of this user (admins; anyone else selects only their own jobs)")
    p.add_argument("--state", action="append", metavar="STATE",
                   help=f"jobs in this state (repeatable, or a comma list; default with filters: {default})")
    p.add_argument("--vc", help="the jobs in this virtual cluster")
    p.add_argument("-y", "--yes", action="store_true",
                   help=f"act on more than {BULK_CONFIRM_OVER} jobs without asking (needed when not on a terminal)")


def _json_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON with stable keys")


def _task_files_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--task", metavar="ROLE/INDEX", help="that task's working directory, not the job's directory")
    p.add_argument("--attempt", type=_non_negative, help="with --task: the attempt (default: the latest)")


def _idempotency_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--idempotency-key", metavar="KEY",
                   help="make the job at most once per KEY: run the same command again with the same KEY (e.g. "
                   "a script after a crash) and it answers the job the first made (default: a new key, kept "
                   "only while this command retries a submit whose answer was lost)")


def _dependency_flags(p: argparse.ArgumentParser) -> None:
    """The job waits for other jobs (added to its file's ``dependencies``), as Slurm's --dependency."""
    for flag, condition, words in (("--after-ok", "afterok", "has succeeded"),
                                   ("--after-any", "afterany", "has ended, however it ended"),
                                   ("--after-notok", "afternotok", "has failed or was stopped")):
        # --after-not-ok too: spelled as its siblings are (a trial typed it and was refused).
        aliases = ("--after-not-ok",) if flag == "--after-notok" else ()
        p.add_argument(flag, *aliases, action="append", default=[], metavar="ID[,ID]", dest=condition,
                       help=f"start only once job ID {words} (repeat, or separate ids with commas)")
    p.add_argument("--dependency", metavar="SPEC",
                   help="Slurm's form of the same: afterok:12:13,afterany:14,afternotok:15")


def add_alerts_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("alerts", help="alerts on abnormal jobs and sick nodes; their rules (admin)")
    p.add_argument("--all", action="store_true", help="resolved alerts too")
    _json_flag(p)
    alert_sub = p.add_subparsers(dest="action", metavar="ACTION")
    q = alert_sub.add_parser("rules", help="the rules, their thresholds and whether they cordon (admin)")
    q.add_argument("--prometheus", action="store_true",
                   help="print them as a Prometheus alerting-rules file, with the current thresholds")
    _json_flag(q)
    q = alert_sub.add_parser("set", help="change a rule: enabled=false, cordon=true, days=7, … (admin)")
    q.add_argument("rule")
    q.add_argument("changes", nargs="+", metavar="KEY=VALUE")
    _json_flag(q)
    q = alert_sub.add_parser("stop", help="stop the job an alert is about; its owner is told why (admin)")
    q.add_argument("id", type=int, metavar="ALERT_ID")
    _json_flag(q)


def _gpu(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of GPUs (0, 0.5, 1, 2…)") from None
    if value < 0:
        raise argparse.ArgumentTypeError("a number of GPUs is 0 or more")
    return value


def add_dev_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "dev", help="interactive JupyterLab sessions: start one (`yard dev --gpu 1`), list, renew, stop",
        description="Start JupyterLab as a job of yours, scheduled like any job, and open it through the server "
        "at /sessions/ID/ (signed in to the portal). It lives --hours from its start (default: the site's, 24 h) "
        "unless renewed.")
    p.add_argument("--gpu", type=_gpu, default=0.0, metavar="N", help="GPUs: 0 (default), a fraction (0.5) or N")
    p.add_argument("--image", help="run in this container image (it, or --environment, needs JupyterLab)")
    p.add_argument("--environment", metavar="E", help="run with this environment (`yard env`), in the image if any")
    p.add_argument("--storage", action="append", default=[], metavar="S", help="mount this storage (repeatable)")
    p.add_argument("--hours", type=float, help="its lifetime (default: the site's)")
    p.add_argument("--vc", help="the virtual cluster (default: default)")
    urgency = p.add_mutually_exclusive_group()
    urgency.add_argument("--priority", choices=PRIORITY_NAMES)
    urgency.add_argument("--oppo", action="store_true", help="opportunistic: on idle GPUs, reclaimed first")
    p.add_argument("--cpu", type=float, help="CPUs")
    p.add_argument("--memory-mb", type=int, metavar="MIB", help="memory in MiB")
    p.add_argument("--name", help="the session job's name (default: jupyterlab)")
    p.add_argument("--wait", action="store_true", help="wait until JupyterLab answers, then print its address")
    p.add_argument("--json", action="store_true", help="print JSON")
    dev_sub = p.add_subparsers(dest="action", metavar="ACTION")
    q = dev_sub.add_parser("list", help="your sessions: state, lifetime left, idle time, kernels")
    q.add_argument("--all", action="store_true", help="an admin: every user's")
    # SUPPRESS: `yard dev --json list` keeps the --json given before the action.
    q.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    for action, text in (("renew", "let a session live longer: --hours from now (default: its own lifetime)"),
                         ("stop", "stop a session")):
        q = dev_sub.add_parser(action, help=text)
        q.add_argument("id", type=int)
        if action == "renew":
            q.add_argument("--hours", type=float)
        q.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")


def add_env_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("env", help="environments jobs run in (`environment: NAME` in the job file)")
    env_sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    q = env_sub.add_parser(
        "create", help="build an environment from a requirements file, as a job of yours (admins: a base one)",
        description="Build a custom environment: a job of yours runs `python3 -m venv` (the base's python with "
        "--base, else the node's) and `pip install -r FILE` into a folder every node sees. Admins declare base "
        "environments with --base-path (a Python environment every node has) or --image.")
    q.add_argument("name")
    q.add_argument("-r", "--requirements", metavar="FILE", help="a pip requirements file ('-' reads stdin)")
    q.add_argument("--base", help="build on this base environment (its packages stay visible)")
    q.add_argument("--group", help="share it with this group's members (default: yours alone; base ones: everyone)")
    q.add_argument("--vc", help="the virtual cluster its build job runs in (default: default)")
    q.add_argument("--base-path", metavar="PREFIX", help="admins: a base environment at this prefix on every node")
    q.add_argument("--image", help="admins: a base environment that is a container image")
    q.add_argument("--wait", action="store_true", help="wait for the build to end; exit 0 only if READY")
    _json_flag(q)
    q = env_sub.add_parser("list", help="the environments you may run jobs in")
    _json_flag(q)
    q = env_sub.add_parser("show", help="one environment: state, path, base, requirements, build job")
    q.add_argument("name")
    _json_flag(q)
    q = env_sub.add_parser("delete", help="delete an environment and its files (refused while jobs use it)")
    q.add_argument("name")
    q.add_argument("--force", action="store_true", help="delete it even while jobs use it or it is being built")
    _json_flag(q)


def add_storage_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("storage", help="storages jobs mount: paths every node has (all but list and show: admin)")
    storage_sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    q = storage_sub.add_parser("create", help="define a storage: a path every node has mounted")
    q.add_argument("name")
    q.add_argument("path", help="absolute path, the same on every node")
    q.add_argument("--read-only", action="store_true", help="read-only for every job")
    q.add_argument("--kind", default="", help="free text: nfs, lustre, 3fs, local...")
    q.add_argument("--description", default="")
    _json_flag(q)
    q = storage_sub.add_parser("list", help="storages you may mount (an admin: all, with their grants)")
    _json_flag(q)
    q = storage_sub.add_parser("show", help="one storage: path, kind, your access, grants")
    q.add_argument("name")
    _json_flag(q)
    for action, text in (("grant", "let a user or a group mount a storage"),
                         ("revoke", "take back a grant (refused while it lets a job mount the storage)")):
        q = storage_sub.add_parser(action, help=text)
        q.add_argument("name")
        who = q.add_mutually_exclusive_group(required=True)
        who.add_argument("--user", help="a user")
        who.add_argument("--group", help="every member of a group")
        if action == "grant":
            q.add_argument("--read-only", action="store_true", help="they may mount it read-only only")
        else:
            q.add_argument("--force", action="store_true", help="stop the jobs that depend on the grant instead")
        _json_flag(q)
    q = storage_sub.add_parser("delete", help="delete a storage, never its files (refused while jobs mount it)")
    q.add_argument("name")
    q.add_argument("--force", action="store_true", help="stop the waiting and running jobs that mount it instead")
    _json_flag(q)


def add_dataset_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("dataset", help="datasets jobs read from each node's cache (docs/user/datasets.md)")
    dataset_sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    q = dataset_sub.add_parser("register", help="register a dataset, or give yours a new source or version")
    q.add_argument("name")
    q.add_argument("source", help="an http(s) URL (a .tar/.tar.gz/.tgz is unpacked), or storage:NAME/PATH")
    q.add_argument("--version", default="", help="names this version of the data; a new one is fetched again")
    q.add_argument("--sha256", default="", help="the archive's SHA-256, checked on every fetch")
    q.add_argument("--description", default="")
    _json_flag(q)
    for action, text in (("list", "datasets you may read"), ("cache", "each node's dataset cache")):
        _json_flag(dataset_sub.add_parser(action, help=text))
    for action, text in (("show", "one dataset: source, version, owner, grants"),
                         ("remove", "forget a dataset of yours (never its source's files)")):
        q = dataset_sub.add_parser(action, help=text)
        q.add_argument("name")
        _json_flag(q)
        if action == "remove":
            _dataset_force(q)
    for action, text in (("grant", "let a user or a group read your dataset"), ("revoke", "take back a grant")):
        q = dataset_sub.add_parser(action, help=text)
        q.add_argument("name")
        who = q.add_mutually_exclusive_group(required=True)
        who.add_argument("--user", help="a user")
        who.add_argument("--group", help="every member of a group")
        _json_flag(q)
        if action == "revoke":
            _dataset_force(q)


def _dataset_force(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--force", action="store_true",
                        help="stop the waiting and running jobs that read it (refused otherwise)")


def build_parser() -> argparse.ArgumentParser:
    """``yard``'s parser. argparse asks gettext for the same few words (``usage:``, the help
    flag's help, …) for each of its ~90 parsers, and gettext looks for translation files on
    disk at each ask: about half of the time to build it (issue 33). Here each word is looked
    up once; argparse is left as it was after. Likewise the terminal's size, which each
    ``add_argument`` asks for (through a help formatter it makes to check the argument, its
    width unused) with two reads of the environment and a system call: a third of what was
    left. Help printed later asks again."""
    import shutil

    words, terminal_size = vars(argparse), shutil.get_terminal_size
    plain = words["_"]
    words["_"] = functools.cache(plain)
    shutil.get_terminal_size = functools.cache(terminal_size)
    try:
        return _build_parser()
    finally:
        words["_"] = plain
        shutil.get_terminal_size = terminal_size


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="yard",
        description="Trainyard: share GPU machines for deep-learning training.",
        epilog="The server address and token come from TRAINYARD_URL / TRAINYARD_TOKEN, "
        "else $TRAINYARD_HOME/client.json (written by `yard up`).",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = sub.add_parser("up", help="run the Trainyard server on this machine (foreground)")
    p.add_argument("--host", default=None, help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=None,
                   help="port to listen on (default 8642; 0: a free one the kernel picks, written to client.json)")
    p.add_argument("--local-gpus", type=int, default=None, metavar="N",
                   help="expose N simulated GPU slots instead of the machine's NVIDIA GPUs")
    p.add_argument("--local-gpu-model", default=None, metavar="MODEL",
                   help="the model simulated GPU slots are named as (default V100)")
    p.add_argument("--local-cpus", type=float, default=None, metavar="N", help="CPUs to offer (default: all)")
    p.add_argument("--local-memory-mb", type=int, default=None, metavar="MIB", help="memory to offer (default: all)")
    p.add_argument("--task-user", default=None, metavar="USER",
                   help="run every task as this one OS user instead of per-user accounts (yard up "
                   "must run as root)")
    p.add_argument("--task-work-dir", default=None, metavar="DIR",
                   help="where tasks' working directories go, in DIR/<cluster id> (default "
                   "/var/lib/trainyard/work/<cluster id> when tasks run under task accounts)")
    p.add_argument("--task-accounts", choices=("auto", "per-user", "server"), default=None,
                   help="whose OS account runs tasks: per-user (each Trainyard user's own; root), server "
                   "(yard up's own); auto (default): per-user as root, else server")
    p.add_argument("--task-sandbox", choices=("auto", "bwrap", "none"), default=None,
                   help="a bubblewrap sandbox per task: auto (default: when bwrap works), bwrap (required), none")
    p.add_argument("--task-limits", choices=("auto", "cgroups", "none"), default=None,
                   help="enforce each task's cpu and memoryMB with cgroups: auto (default: where cgroups "
                   "work here), cgroups (required), none")
    p.add_argument("--backend", choices=("local", "slurm"), default=None,
                   help="what runs the tasks: local processes (default) or the Slurm cluster that "
                   "SLURM_CONF and the Slurm commands on PATH point at")
    p.add_argument("--slurm-partition", default=None, metavar="NAME",
                   help="with --backend slurm: use only this partition's nodes, and submit to it")

    p = sub.add_parser("doctor", help="check this install end to end and say how to fix what is wrong (run on the "
                       "server's machine, as yard up runs: root)")
    p.add_argument("--backend", choices=("local", "slurm"), default=None,
                   help="the backend to check (default: the server's setting, as yard up reads it)")
    p.add_argument("--slurm-partition", default=None, metavar="NAME", help="with --backend slurm: only this "
                   "partition's nodes")
    _json_flag(p)

    p = sub.add_parser("submit", help="submit a job file (YAML or JSON; '-' reads stdin), with its project folder")
    p.add_argument("file")
    p.add_argument("--dry-run", action="store_true", help="validate and show the normalised job only")
    _dependency_flags(p)
    add_submit_sweep_flags(p)
    where = p.add_mutually_exclusive_group()
    where.add_argument("--workdir", metavar="DIR",
                       help="send this folder with the job: every task starts in a copy of it (default: the job "
                            "file's `workdir`, else the current folder when the job file is in it; "
                            ".gitignore and .yardignore say what stays behind)")
    where.add_argument("--no-workdir", action="store_true", help="send no folder with the job")
    p.add_argument("--notify", type=notify_on, metavar="EVENTS",
                   help="tell me of these events of the job (its file's notify.on; default: your account's): "
                   + NOTIFY_HELP.removeprefix("which events: "))
    _idempotency_flag(p)
    _json_flag(p)

    p = sub.add_parser("jobs", help="list jobs, newest first")
    p.add_argument("--state", help="comma-separated states, e.g. WAITING,RUNNING")
    p.add_argument("--user", help="only this user's jobs")
    p.add_argument("--vc", help="only this virtual cluster's jobs")
    p.add_argument("--name", help="only jobs whose name contains this text (any case)")
    p.add_argument("--limit", type=int, default=JOBS_PER_PAGE, help=f"jobs per page (default {JOBS_PER_PAGE}, max 500)")
    p.add_argument("--before", type=int, help="page cursor: show jobs older than this id")
    _json_flag(p)

    p = sub.add_parser("job", help="show one job: state, attempts, tasks, placement, events")
    p.add_argument("id", type=int)
    p.add_argument("--metrics", action="store_true",
                   help="show instead what each task used: GPU, GPU memory, CPU and memory, now / mean / max")
    p.add_argument("--since", metavar="WHEN",
                   help="with --metrics: from this long ago (90m, 1h, 7d) or this time (ISO 8601); default 1h")
    p.add_argument("--until", metavar="WHEN", help="with --metrics: up to then, as --since; default: now")
    p.add_argument("--task", metavar="ROLE/INDEX", help="with --metrics: only this task")
    _json_flag(p)

    p = sub.add_parser("clone", help="submit a copy of a job, its secrets kept (--edit: change it first)")
    p.add_argument("id", type=int)
    source = p.add_mutually_exclusive_group()
    source.add_argument("--edit", action="store_true",
                        help="first open $VISUAL or $EDITOR on the job as shown (secrets masked as ******; "
                        "what stays masked keeps the original's value)")
    source.add_argument("--file", metavar="FILE",
                        help="run this job file instead (e.g. an edited `yard job ID --json` spec); masked "
                        "values in it are filled from the original")
    p.add_argument("--name", help="the copy's name")
    p.add_argument("--vc", help="the copy's virtual cluster")
    p.add_argument("--priority", choices=PRIORITY_NAMES, help="the copy's priority")
    _idempotency_flag(p)
    _json_flag(p)

    p = sub.add_parser("logs", help="print a task's output (or every task's, with --all)")
    p.add_argument("id", type=int)
    which = p.add_mutually_exclusive_group()
    which.add_argument("--task", help="ROLE/INDEX (default: the first task)")
    which.add_argument("--all", action="store_true", dest="all_tasks",
                       help="every task's log, each line prefixed [ROLE/INDEX]: task after task, or with -f "
                            "as lines are written until every task ends")
    p.add_argument("--attempt", type=int, help="attempt number (default: the latest)")
    runs = p.add_mutually_exclusive_group()
    runs.add_argument("--run", type=_non_negative, metavar="N",
                      help="the task's run N in the attempt (0 first): a task re-run in place after a failure "
                           "(taskRetryCount) or restarted by an elastic resize has a log per run; default: the latest")
    runs.add_argument("-p", "--previous", action="store_true",
                      help="the task's run before its latest (as kubectl logs --previous)")
    p.add_argument("--tail", type=int, metavar="N", help="only the last N lines (with --all: of each task)")
    p.add_argument("--limit-bytes", type=_non_negative, metavar="N",
                   help="print at most N bytes (and say on stderr what was left out); default: the whole log")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing until the task ends (waiting first, if the job has not started)")

    p = sub.add_parser("ls", help="list a folder of a job's directory (or, with --task, of a task's working "
                       "directory); links are shown, never followed")
    p.add_argument("target", metavar="JOB[:PATH]", help="e.g. 42 or 42:out")
    _task_files_flags(p)
    _json_flag(p)
    p = sub.add_parser("cp", help="copy a file from a job's directory (or, with --task, a task's working "
                       "directory) to this machine")
    p.add_argument("source", metavar="JOB:PATH", help="e.g. 42:out/result.json")
    p.add_argument("dest", metavar="LOCAL", help="a file, a folder to copy into, or - for stdout")
    p.add_argument("-r", "--recursive", action="store_true",
                   help="copy a folder (JOB: the whole directory) and what is in it; links are not copied")
    _task_files_flags(p)
    p.add_argument("-q", "--quiet", action="store_true", help="say nothing once copied")

    p = sub.add_parser("port-forward", help="reach a port of a running task from a local port, "
                                            "through the server (Ctrl-C stops)")
    p.add_argument("id", type=int)
    p.add_argument("ports", metavar="LOCAL:REMOTE",
                   help="listen on 127.0.0.1:LOCAL (0: any free port); REMOTE is one of the task's ports")
    p.add_argument("--task", help="ROLE/INDEX (default: the first task)")

    p = sub.add_parser("exec", help="run a command inside a running task (its container or sandbox, "
                                    "environment, working directory and user); exits with its status")
    p.add_argument("id", type=int)
    p.add_argument("--task", help="ROLE/INDEX (default: the first running task)")
    p.add_argument("-t", "--tty", action="store_true", help="give the command a terminal (ours must be one)")
    p.add_argument("argv", nargs="*", metavar="-- CMD", help="the command and its arguments, after --")

    p = sub.add_parser("shell", help="an interactive shell inside a running task (a terminal; exit ends it)")
    p.add_argument("id", type=int)
    p.add_argument("--task", help="ROLE/INDEX (default: the first running task)")

    p = sub.add_parser("stop", help="stop jobs, by ids and/or filters (SIGTERM, then SIGKILL after its grace period)")
    _bulk_selection(p, "stop")
    p.add_argument("--reason", default="", help="why, told to the job's owner in its message and history")
    _json_flag(p)

    p = sub.add_parser("suspend", help="suspend jobs, by ids and/or filters, until `yard resume` (each saves "
                                       "its state; needs 'preemption: suspend' if running)")
    _bulk_selection(p, "suspend")
    _json_flag(p)

    p = sub.add_parser("resume", help="let suspended jobs, by ids and/or filters, run again, each as a new "
                                      "attempt with its place in the queue")
    _bulk_selection(p, "resume")
    _json_flag(p)

    p = sub.add_parser("wait", help="wait for a job to end; exit 0 only if it SUCCEEDED")
    p.add_argument("id", type=int)
    p.add_argument("--timeout", type=float, metavar="S", help="give up after S seconds (exit 124)")
    p.add_argument("--retry-for", type=float, metavar="S",
                   help="while the server cannot be reached or fails (a restart), keep asking, less and less "
                   "often, for up to S seconds (default 120; 0: exit 3 at once)")
    _json_flag(p)

    p = sub.add_parser("nodes", help="show nodes, their GPUs, what is allocated and what is in use")
    _json_flag(p)

    p = sub.add_parser("top", help="nodes and running jobs with live GPU, CPU and memory use (q or Ctrl-C quits)")
    p.add_argument("--interval", type=_positive_seconds, default=TOP_INTERVAL_SECONDS, metavar="S",
                   help=f"seconds between refreshes (default {TOP_INTERVAL_SECONDS:g})")
    p.add_argument("--once", action="store_true", help="print one snapshot and exit (also when not on a terminal)")
    _json_flag(p)

    p = sub.add_parser("user", help="manage users (admin)")
    user_sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    q = user_sub.add_parser("create", help="create a user")
    q.add_argument("name")
    q.add_argument("--admin", action="store_true", help="make the user an admin")
    _json_flag(q)
    q = user_sub.add_parser("list", help="list users")
    _json_flag(q)
    q = user_sub.add_parser("disable", help="refuse a user's tokens; their jobs go on unless --stop-jobs")
    q.add_argument("name")
    q.add_argument("--stop-jobs", action="store_true", help="also stop their waiting and running jobs")
    _json_flag(q)
    q = user_sub.add_parser("enable", help="accept a disabled user's tokens again")
    q.add_argument("name")
    _json_flag(q)
    q = user_sub.add_parser("passwd", help="set your portal password, or (admin) reset anyone's",
                            description="Set a password for the web portal's sign-in: your own (asked twice, "
                            "after your current one if you have one), or as an admin anyone's. The user's "
                            "browser sessions are signed out; tokens keep working.")
    q.add_argument("name", nargs="?", help="whose password (admins; default: yours)")
    q.add_argument("--password-stdin", action="store_true",
                   help="read the new password from stdin's first line (changing your own existing one: "
                   "the current on the first line, the new on the second)")
    q.add_argument("--clear", action="store_true", help="remove NAME's password: token sign-in only (admin)")
    _json_flag(q)
    q = user_sub.add_parser("delete", help="delete a user (refused while they have waiting or running jobs)")
    q.add_argument("name")
    q.add_argument("--force", action="store_true", help="stop their waiting and running jobs instead of refusing")
    _json_flag(q)

    p = sub.add_parser("token", help="manage API tokens")
    token_sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    q = token_sub.add_parser("create", help="create a token (for yourself, or --user as admin)")
    q.add_argument("--user", help="whose token (admins only for others)")
    q.add_argument("--name", default="", help="a note to recognise the token by")
    _json_flag(q)
    q = token_sub.add_parser("list", help="your tokens: id, note, created, last used (never the secret)")
    who = q.add_mutually_exclusive_group()
    who.add_argument("--user", help="another user's tokens (admin)")
    who.add_argument("--all", action="store_true", help="every user's tokens (admin)")
    _json_flag(q)
    q = token_sub.add_parser("revoke", help="revoke a token by its id (see `yard token list`)")
    q.add_argument("id", type=int)
    _json_flag(q)

    p = sub.add_parser("vc", help="virtual clusters: guaranteed GPU shares (all but list: admin)")
    vc_sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    q = vc_sub.add_parser("create", help="create a virtual cluster with a guaranteed quota")
    q.add_argument("name")
    q.add_argument("--gpus", type=int, required=True, help="guaranteed whole GPUs")
    q.add_argument("--model", help="GPU model the quota is for (default: any model)")
    q.add_argument("--no-priority-preemption", action="store_true",
                   help="higher priorities in this VC wait instead of preempting lower ones")
    q.add_argument("--gpu-sharing", choices=GPU_SHARING_NAMES,
                   help="whose fractional GPU shares its jobs may share a device with (default: same-user)")
    _borrowing_flags(q, keep=False)
    _json_flag(q)
    q = vc_sub.add_parser("list", help="quota, used, borrowed (of its limit), weight and waiting per virtual cluster")
    _json_flag(q)
    q = vc_sub.add_parser("grant", help="let a user or @group submit to a virtual cluster")
    q.add_argument("name")
    q.add_argument("grantee", metavar="USER|@GROUP")
    _json_flag(q)
    q = vc_sub.add_parser("revoke", help="take back a user's or @group's grant (refused while it runs jobs)")
    q.add_argument("name")
    q.add_argument("grantee", metavar="USER|@GROUP")
    q.add_argument("--force", action="store_true", help="stop the jobs that depend on the grant instead of refusing")
    _json_flag(q)
    q = vc_sub.add_parser("delete", help="delete a virtual cluster (refused while jobs wait or run in it)")
    q.add_argument("name")
    q.add_argument("--force", action="store_true", help="stop its waiting and running jobs instead of refusing")
    _json_flag(q)
    q = vc_sub.add_parser("sharing", help="set whose fractional GPU shares a VC's jobs may share a device with")
    q.add_argument("name")
    q.add_argument("rule", choices=GPU_SHARING_NAMES,
                   help="same-user, same-group (a group in common) or anyone; the stricter of two VCs' rules applies")
    _json_flag(q)
    q = vc_sub.add_parser("quota", help="change a virtual cluster's quota for one GPU model")
    q.add_argument("name")
    q.add_argument("--gpus", type=int, required=True, help="guaranteed whole GPUs (0 removes the model)")
    q.add_argument("--model", help="GPU model (default: any model)")
    _json_flag(q)
    q = vc_sub.add_parser("borrowing", help="set how much a VC (default too) may borrow and lend, and its weight")
    q.add_argument("name")
    _borrowing_flags(q, keep=True)
    _json_flag(q)

    p = sub.add_parser("group", help="groups of users (admin)")
    group_sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    q = group_sub.add_parser("create", help="create a group")
    q.add_argument("name")
    _json_flag(q)
    q = group_sub.add_parser("add", help="add a user to a group")
    q.add_argument("name")
    q.add_argument("user")
    _json_flag(q)
    q = group_sub.add_parser("remove", help="take a user out of a group (refused while it runs their jobs)")
    q.add_argument("name")
    q.add_argument("user")
    q.add_argument("--force", action="store_true",
                   help="stop their jobs that depend on the group's grants instead of refusing")
    _json_flag(q)
    q = group_sub.add_parser("list", help="groups and their members")
    _json_flag(q)

    p = sub.add_parser("quota", help="per-user GPU quota per priority (admin)")
    quota_sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    q = quota_sub.add_parser("set", help="at most N GPUs for USER at a priority")
    q.add_argument("user")
    q.add_argument("--priority", required=True, choices=PRIORITY_NAMES)
    q.add_argument("--gpus", type=float, help="the limit; leave out to remove it")
    _json_flag(q)
    q = quota_sub.add_parser("list", help="every per-user quota")
    _json_flag(q)

    p = sub.add_parser("node", help="node administration (admin)")
    node_sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    for action, text in (("cordon", "place nothing new on a node"), ("uncordon", "allow placements again")):
        q = node_sub.add_parser(action, help=text)
        q.add_argument("name")
        _json_flag(q)
    q = node_sub.add_parser("label", help="set labels (KEY=VALUE) or remove them (KEY-), live; jobs' selectors "
                                          "see them (node.labels)")
    q.add_argument("name")
    q.add_argument("changes", nargs="+", metavar="KEY=VALUE|KEY-")
    _json_flag(q)

    p = sub.add_parser("image", help="the image cache: which node holds which container image; pre-pull or "
                       "evict one")
    image_sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    q = image_sub.add_parser("list", help="every node's images: node, image, id, size, created, pulled at")
    _json_flag(q)
    q = image_sub.add_parser("pull", help="pull an image to a node (default: every node) ahead of its jobs (admin)")
    q.add_argument("image")
    q.add_argument("--node", default=None, help="only this node")
    _json_flag(q)
    q = image_sub.add_parser("evict", help="remove an image from a node (default: every node) where it is (admin); "
                             "refused while a job's task runs in it")
    q.add_argument("image")
    q.add_argument("--node", default=None, help="only this node")
    _json_flag(q)

    p = sub.add_parser("usage", help="GPU-, CPU- and memory-hours and efficiency per user, VC, group or job "
                       "(like sreport); a non-admin sees their own jobs")
    p.add_argument("--by", choices=("user", "vc", "group", "job"), default=None,
                   help="what each line adds up (default: what --group or --vc names, else user)")
    p.add_argument("--user", help="only this user's jobs (admin, or yourself)")
    p.add_argument("--vc", help="only jobs in this virtual cluster")
    p.add_argument("--group", help="only jobs of this group's members")
    p.add_argument("--since", type=moment, metavar="WHEN",
                   help="start: 7d, 12h, 2w ago, or a date 2026-11-01 / 2026-11-01T08:00 (UTC); default: 7d")
    p.add_argument("--until", type=moment, metavar="WHEN", help="end, excluded (same forms); default: now")
    _json_flag(p)

    p = sub.add_parser("whoami", help="show who the configured token belongs to")
    _json_flag(p)

    add_env_parser(sub)
    add_dev_parser(sub)
    add_alerts_parser(sub)
    add_account_parser(sub)
    add_storage_parser(sub)
    add_dataset_parser(sub)
    add_sweep_parser(sub)
    add_sim_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:
        # The reader went away (``yard jobs | head``): what it read was all it wanted. Point
        # stdout at nothing, so that the flush at exit does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _main(argv: Sequence[str] | None) -> int:
    args = _parse(build_parser(), list(sys.argv[1:] if argv is None else argv))
    # What a command needs (the server for `up`, the SDK and pydantic for the others) is
    # imported only once it is known which command runs: `yard --help` loads none of it.
    if args.command == "up":
        from trainyard.cli.up import run_up

        return run_up(args)
    if args.command == "sim":
        return run_sim(args)
    if args.command == "doctor":
        from trainyard.cli.doctor import run_doctor

        return run_doctor(args)
    if argv is None:  # `yard` is the program, not a caller's library: its requests skip httpx where
        from trainyard.client_http import for_the_program  # they can, and its import where it is needed

        for_the_program()
    from trainyard.cli.commands import run_command

    if args.command == "top":  # its own screen sequences; it escapes the text it shows (cli/terminal.py)
        return run_command(args)
    from trainyard.cli.terminal import escaping

    with escaping():
        return run_command(args)


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """``yard exec ID [OPTIONS] -- CMD ARGS…``: what follows the first ``--`` is the command,
    options and all, never parsed as yard's own."""
    if "--" in argv and "exec" in argv[:argv.index("--")]:
        cut = argv.index("--")
        args = parser.parse_args(argv[:cut])
        if args.command == "exec":
            args.argv = [*args.argv, *argv[cut + 1:]]
            return args
    return parser.parse_args(argv)


if __name__ == "__main__":
    sys.exit(main())
