"""The on-disk protocol of one local task directory: file names and atomic JSON files.

Stdlib only: the supervisor imports this module and must start fast.

A task directory holds, in the order they appear:

``spec.json``       written by the backend: what to run (script, env, the job's own env,
                    cwd, shell, grace; with ``run_as`` also the user and its script copy).
``supervisor.log``  the supervisor's own stdout/stderr (diagnostics, tracebacks).
``pid.json``        created exclusively by the supervisor that claims the task (so two
                    supervisors can never both run it), first with ``"task": null``, then
                    replaced with the task's pid/pgid and its waiter's pid once both have
                    been forked but before the task is allowed to exec. A backend that
                    gives up on a supervisor that never started claims it instead, with
                    ``"supervisor": null``.
``script.sh``       the script, written by the supervisor, run by ``bash --noprofile --norc``.
``work/``           the task's working directory (unless ``work_dir_root`` puts it elsewhere).
``output.log``      the task's stdout and stderr, both appended to the same file.
``stop.json``       written (fsync'd) by the backend before it signals a stop: the grace to
                    use and the wall-clock deadline for SIGKILL, which ``observe`` enforces
                    when no supervisor is left to.
``status.json``     written by the task's waiter (its parent; fsync'd) when the task has
                    ended and its group is gone: the raw status, which survives the loss of
                    the supervisor (see ``supervisor``).
``exit.json``       written last by the supervisor (fsync'd): how the task ended.

Every JSON file is replaced atomically (temporary file + rename), so a reader sees either
no file or a whole one; a reader that still finds garbage (after a machine crash) gets
``None`` from :func:`read_json` and treats the file as absent.
"""

from __future__ import annotations

import json
import os
import time

# Stdlib-only and on the launch path: typing costs ~10 ms to import, so only mypy sees it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SPEC = "spec.json"
PID = "pid.json"
STOP = "stop.json"
STATUS = "status.json"
EXIT = "exit.json"
SCRIPT = "script.sh"
OUTPUT_LOG = "output.log"
SUPERVISOR_LOG = "supervisor.log"
WORK_DIR = "work"


def write_json(path: str, data: object, *, durable: bool = False, exclusive: bool = False) -> bool:
    """Atomically write ``data`` as JSON to ``path``.

    ``durable`` fsyncs the file and its directory, so the content survives a machine
    crash. ``exclusive`` publishes the file only if ``path`` does not exist yet (a hard
    link cannot overwrite), and returns False when it already did.
    """
    tmp = f"{path}.{os.getpid()}.{time.monotonic_ns()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, json.dumps(data, indent=1).encode())
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    try:
        if exclusive:
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
        else:
            os.replace(tmp, path)
            tmp = ""
    finally:
        if tmp:
            os.unlink(tmp)
    if durable:
        dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    return True


def read_json(path: str) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when it is missing or unreadable."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read())
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None
    return data if isinstance(data, dict) else None
