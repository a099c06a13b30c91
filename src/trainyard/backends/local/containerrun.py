"""Inside a local task's process: bring the task's image to the node, then run the container.

Stdlib only, and run from the supervisor's private copy (``launcher``): the task process
(the waiter's child, root, its output already in ``output.log``) calls
:func:`exec_container` instead of exec'ing bash when the task's spec has a ``container``
(``backends/containers`` builds it). Steps:

1. ``ENGINE image exists IMAGE``; when the node lacks the image, ``ENGINE pull IMAGE`` (its
   output goes to the task's log), timed. ``image.json`` records how the image came
   (``pulled`` and the seconds, or already there; or the pull's failure, which ends the
   task with status 125), for the backend to report in the job's events. A task that also
   runs in a Python environment then runs its check (``environment_check`` in
   ``backends/containers``): when the environment's python cannot run in the image, that
   is the record's error and the task ends with status 125 too.
2. Without a memory cgroup (no memory limit): exec ``ENGINE run …`` in the foreground. The
   task's process *is* the engine's client: the supervisor's signals reach it and it
   proxies them into the container (``--sig-proxy``, on by default), where ``catatonit -g``
   hands them to the whole process group of the task's script, as they reach a bare
   task's group. Its exit status is the container's.
3. With one (``container["cgroup"]``, see ``backends/containercgroup``): make the cgroup
   with the task's memory limit, watch it for OOM kills (v1: an eventfd on
   ``memory.oom_control``; v2: ``memory.events``), start the client as a child (in this
   process group, so the signals reach it as in step 2; this process outlives them), wait
   for it, record the OOM kills in ``container.json``, remove the cgroup, and end as the
   client ended (its status, or killed by its signal): ``containercgroup.run_in``, which
   the Slurm backend's task runner uses too.

A client killed by SIGKILL (a stop's grace ran out) leaves its container running under
the engine's monitor: the waiter then calls :func:`remove_container`, which also removes
the cgroup.
"""

from __future__ import annotations

import os
import time

from trainyard.backends import containercgroup
from trainyard.backends.local import taskfiles

# Stdlib-only and on the launch path: typing costs ~10 ms to import, so only mypy sees it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

IMAGE_RECORD = "image.json"  # in the task directory (``container["record"]``)
CONTAINER_RECORD = containercgroup.CONTAINER_RECORD  # beside it: the OOM kills the container's cgroup saw
# The engine's own "could not run the container" status (podman and docker use 125).
PULL_FAILED = containercgroup.CANNOT_RUN


def exec_container(container: dict[str, Any]) -> NoReturn:
    """The module docstring's steps; never returns."""
    env = container["engine_env"]
    record_path = container["record"]
    image, node = container["image"], container["node"]
    started = time.monotonic()
    present = _run(container["exists"], env, quiet=True) == 0
    if not present:
        print(f"trainyard: pulling {image} on node {node}", flush=True)
        status, said = _run_teed(container["pull"], env)
        seconds = round(time.monotonic() - started, 1)
        if status != 0:
            error = f"could not pull {image} on node {node} (exit status {status}; the task log has its output)"
            # The engine's last words say whether pulling again could help (``containers.pull_failure``).
            lines = [line.strip() for line in said.splitlines() if line.strip()]
            taskfiles.write_json(record_path, {"image": image, "node": node, "ok": False, "seconds": seconds,
                                               "error": error, "said": lines[-1][-500:] if lines else ""})
            print(f"trainyard: {error}", flush=True)
            os._exit(PULL_FAILED)
        record = {"image": image, "node": node, "ok": True, "pulled": True, "seconds": seconds}
        now = time.time()
        os.makedirs(os.path.dirname(container["pull_record"]), mode=0o700, exist_ok=True)
        taskfiles.write_json(container["pull_record"], {  # the node's image list shows it
            "image": image, "pulled_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(now))})
    else:
        record = {"image": image, "node": node, "ok": True, "pulled": False, "seconds": 0.0}
    check = container.get("environment_check")
    if check is not None and _run(check["argv"], env) != 0:  # its output goes to the task's log
        taskfiles.write_json(record_path, {**record, "ok": False, "error": check["error"]})
        print(f"trainyard: {check['error']}", flush=True)
        os._exit(PULL_FAILED)
    taskfiles.write_json(record_path, record)
    argv = container["run"]
    plan = container.get("cgroup")
    if plan is None:
        os.execve(argv[0], argv, env)
    containercgroup.run_in(plan, argv, env, os.path.join(os.path.dirname(record_path), CONTAINER_RECORD))


def remove_container(container: dict[str, Any]) -> None:
    """Remove the task's container at once, if it still exists (errors ignored: it is gone)."""
    _run(container["remove"], container["engine_env"], quiet=True)
    if container.get("cgroup") is not None:
        containercgroup.remove(container["cgroup"])


def _run_teed(argv: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run ``argv`` with its stdout and stderr copied to this process's stdout as they come;
    its exit status (as :func:`_run`) and the last few KiB it wrote."""
    read_end, write_end = os.pipe()
    actions = [(os.POSIX_SPAWN_DUP2, write_end, 1), (os.POSIX_SPAWN_DUP2, write_end, 2),
               (os.POSIX_SPAWN_CLOSE, read_end)]
    pid = os.posix_spawn(argv[0], argv, env, file_actions=actions)
    os.close(write_end)
    tail = b""
    while chunk := os.read(read_end, 65536):
        view = memoryview(chunk)
        while view:
            view = view[os.write(1, view):]
        tail = (tail + chunk)[-4096:]
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
    return code, tail.decode("utf-8", "replace")


def _run(argv: list[str], env: dict[str, str], *, quiet: bool = False) -> int:
    """Run ``argv`` with this process's stdout/stderr (``quiet``: /dev/null); its exit
    status (128+N when killed by signal N)."""
    actions = []
    if quiet:
        actions = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_WRONLY, 0) for fd in (1, 2)]
    pid = os.posix_spawn(argv[0], argv, env, file_actions=actions)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status)
