"""Issue 27, finding 2: root through ``yard exec`` into one's own task, on the default root
install (``yard up`` as root: per-user task accounts and the bubblewrap sandbox); and the
same class at launch: the root chain that starts a sandboxed task ran with the job's
environment (``LD_PRELOAD`` as root), see the last test.

The route: exec joined "the lowest-PID process of the task's group whose mount namespace
differs from bwrap's". A task that makes its own user and mount namespace (``unshare
-Urm``), covers ``/usr/bin/setpriv`` there with its own script and keeps a process in it,
and whose process has a PID below the sandbox's init (after the PID counter wrapped), was
joined instead of the sandbox: the server then ran ``/usr/bin/setpriv`` from the task's
mount namespace, the task's script, as root. Now exec joins only the sandbox's init (bwrap's
child, found from bwrap's PID and start time recorded at launch), drops privileges itself,
and tasks make no user namespaces unless the admin allows it.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.server import Server, default_install, wait_until
from trainyard.client import Client

pytestmark = pytest.mark.e2e

SECRET = "root's own secret\n"


class Cluster:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.token = server.add_users("alice")["alice"]
        self.alice = Client(server.url, self.token)

    def exec(self, job: int, *command: str) -> tuple[int, str, str]:
        done = self.server.yard("exec", str(job), "--", *command, token=self.token)
        return done.returncode, done.stdout, done.stderr

    def started(self, job: int, word: str) -> str:
        wait_until(lambda: word.encode() in self.alice.logs(job), timeout=120, what=f"job {job} to say {word}")
        return next(line for line in self.alice.logs(job).decode().splitlines() if word in line)


def _cluster(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Iterator[Cluster]:
    with default_install(tmp_path_factory, gpus=1, extra_env=env) as srv:
        yield Cluster(srv)


@pytest.fixture(scope="module")
def default(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    yield from _cluster(tmp_path_factory, {})


@pytest.fixture(scope="module")
def allowing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """An admin who lets tasks make user namespaces: exec must still never join one."""
    yield from _cluster(tmp_path_factory, {"TRAINYARD_TASK_USER_NAMESPACES": "true"})


def _job(name: str, *commands: str) -> dict[str, object]:
    return {"name": name, "taskRoles": {"main": {
        "resourcePerInstance": {"cpu": 0.5, "memoryMB": 256}, "commands": list(commands)}}}


def _stat(pid: int) -> tuple[int, int, int] | None:
    """``(ppid, pgrp, start_time)`` of ``pid``."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2:].split()
    return int(fields[1]), int(fields[2]), int(fields[19])


def _mnt(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def _bwrap_of(server: Server, work_dir: str) -> int:
    """The task's recorded process (bwrap, its group's leader), from its task dir."""
    for pid_file in server.home.rglob("pid.json"):
        spec = json.loads((pid_file.parent / "spec.json").read_text())
        record = json.loads(pid_file.read_text())
        if spec["cwd"] == work_dir and record.get("task"):
            return int(record["task"]["pid"])
    raise AssertionError(f"no task record for {work_dir}")


def _group(pgid: int) -> list[int]:
    return sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and (_stat(int(p)) or (0, 0))[1] == pgid)


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _old_selection(pgid: int) -> int | None:
    """What exec joined before the fix: the lowest PID of the group in another mount
    namespace than the group's leader (bwrap, outside the sandbox)."""
    outside = _mnt(pgid)
    return next((pid for pid in _group(pgid) if _mnt(pid) not in (None, outside)), None)


def test_exec_never_joins_a_namespace_the_task_made_nor_runs_its_file_as_root(allowing: Cluster,
                                                                              gates: Path) -> None:
    """The route of finding 2, made deterministic. The PID counter's wrap is what put the
    task's own-namespace process below the sandbox's init; here the test, as root, sets
    the host's next PID (``/proc/sys/kernel/ns_last_pid``, which only root may write: it is
    the counter the wrap moves) to a free PID below the init just before the task forks
    that process, and checks that the old selection then picks it. The task itself does
    what any user's task can: ``unshare -Urm``, a bind mount of its own script over
    ``/usr/bin/setpriv`` in its own mount namespace, a process kept there. Then its owner
    runs ``yard exec``: before the fix the planted script ran as root (it reads a 0600
    root file and writes a root-owned copy); now the command runs in the sandbox as the
    task's account, without capabilities, and the planted file never runs."""
    secret = gates / "secret"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    planted = f"#!/bin/sh\\ncat {secret} > {gates}/stolen\\n"  # printf's \n
    job = allowing.alice.submit(_job(
        "planted",
        f"printf '{planted}' > planted && chmod 755 planted",
        'echo "waiting uid=$(id -u) pwd=$PWD"',
        # A line on fifo goN: fork at once (the test has just set the next PID) a process in
        # a user and mount namespace of the task's own, with the planted file. A fifo per
        # attempt: with one fifo the test's writer could find the last attempt's reader about
        # to close it, and its line was lost (the test then waited for a process never made).
        "i=0; while mkfifo go$i && read next < go$i; do"
        " unshare -Urm sh -c 'mount --bind \"$0\" /usr/bin/setpriv && exec sleep 600' \"$PWD/planted\" &"
        " i=$((i+1)); done",
    )).id
    said = allowing.started(job, "waiting")
    uid, work = said.split("uid=")[1].split()[0], said.split("pwd=")[1]
    bwrap = _bwrap_of(allowing.server, work)
    init = wait_until(lambda: next((p for p in _group(bwrap) if (_stat(p) or (0,))[0] == bwrap), None),
                      what="the sandbox's init")
    sandbox_mnt = _mnt(init)

    def own_namespace() -> set[int]:
        return {p for p in _group(bwrap) if _mnt(p) not in (None, sandbox_mnt, _mnt(bwrap))
                and _cmdline(p).startswith(b"sleep\x00600")}

    def reader(attempt: int) -> int | None:  # the task waits on this attempt's fifo
        try:
            return os.open(Path(work) / f"go{attempt}", os.O_WRONLY | os.O_NONBLOCK)
        except OSError:  # ENXIO: not yet
            return None

    seen: set[int] = set()
    for attempt in range(40):
        fifo = wait_until(functools.partial(reader, attempt), what="the task to wait on its fifo")
        free = next(p for p in range(init - 1, 300, -1) if not os.path.exists(f"/proc/{p}"))
        Path("/proc/sys/kernel/ns_last_pid").write_text(str(free - 1))
        os.write(fifo, b"next\n")
        os.close(fifo)
        made = min(wait_until(lambda: own_namespace() - seen, timeout=60, what="the task's own-namespace process"))
        seen.add(made)
        if made < init:
            break
    else:
        pytest.fail("could not give the task's own-namespace process a PID below the sandbox's init")
    assert _old_selection(bwrap) == made, "the route: the old selection picks the task's own namespace"

    code, out, err = allowing.exec(job, "id", "-u")
    assert not (gates / "stolen").exists(), "the task's planted file ran as root through yard exec"
    assert (code, out.strip()) == (0, uid), err
    # In the sandbox (its /tmp is not the host's), as the task is: no capabilities of any
    # kind, no new privileges, the task's account.
    code, out, err = allowing.exec(job, "sh", "-c", "grep -E '^(Cap|NoNewPrivs)' /proc/self/status; id -u")
    fields = dict(line.split(":\t") for line in out.splitlines()[:-1])
    assert code == 0, err
    assert {fields[c] for c in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")} == {"0000000000000000"}, out
    assert fields["NoNewPrivs"] == "1" and out.splitlines()[-1] == uid
    # The admin allows user namespaces here: the task made one, and so may its exec.
    code, out, err = allowing.exec(job, "unshare", "-U", "true")
    assert code == 0, err
    allowing.alice.stop(job)


def test_a_default_task_cannot_make_a_user_namespace_nor_can_its_exec(default: Cluster) -> None:
    job = default.alice.submit(_job(
        "userns",
        "unshare -U true && echo userns=made || echo userns=refused",
        "unshare -Urm true && echo root-ns=made || echo root-ns=refused",
        "python3 -c 'import threading, subprocess; t = threading.Thread(target=print); t.start(); t.join();"
        " subprocess.run([\"true\"], check=True); print(\"threads=ok\")'",
        'echo "ready uid=$(id -u)"',
        "exec sleep 600",
    )).id
    default.started(job, "ready")
    log = default.alice.logs(job).decode()
    assert "userns=refused" in log and "root-ns=refused" in log, log
    assert "threads=ok" in log, log  # clone3 is refused as unknown: libc falls back to clone
    code, out, err = default.exec(job, "unshare", "-U", "true")
    assert code != 0 and "Operation not permitted" in err, (code, out, err)
    code, out, err = default.exec(job, "sh", "-c", "grep Seccomp: /proc/self/status")
    assert code == 0 and out.split() == ["Seccomp:", "2"], (out, err)
    default.alice.stop(job)


# The job's library: its constructor runs in every process that loads it and leaves a file
# named after its uid, pid and program (new files only: root may not open another's file
# in a sticky folder).
PRELOAD_C = r"""
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
__attribute__((constructor)) static void mark(void) {
    char path[4096], comm[64] = "";
    int in = open("/proc/self/comm", O_RDONLY);
    if (in >= 0) { ssize_t n = read(in, comm, sizeof comm - 1); comm[n > 0 ? n - 1 : 0] = 0; close(in); }
    snprintf(path, sizeof path, "%s/%d-%d-%s", MARKS, (int)getuid(), (int)getpid(), comm);
    close(open(path, O_WRONLY | O_CREAT | O_EXCL, 0644));
}
"""


def test_the_job_env_reaches_only_the_task_never_a_root_process_that_starts_it(default: Cluster,
                                                                                gates: Path) -> None:
    """The launch's root chain (env, bwrap, the stop guard, the privilege drop) ran with the
    job's environment: a job whose ``env`` names ``LD_PRELOAD`` had its library's code run
    as uid 0, with every capability, before the drop. The library is a file the user wrote:
    a first job of alice's copies it into its job directory (on the host, where the root
    chain runs) and into the shared folder (which its sandbox shows too) and waits; a second
    one names both in ``LD_PRELOAD``. Before the fix the library ran as uid 0 in ``env``,
    ``bwrap``, ``sh`` and ``setpriv``; now only the task's own processes, as alice's
    account, load it."""
    if shutil.which("gcc") is None:
        pytest.fail("gcc is needed to build the job's library (apt-get install gcc libc6-dev; .ci/run installs it)")
    marks = gates / "marks"
    marks.mkdir()
    marks.chmod(0o1777)
    source = gates / "preload.c"
    source.write_text(PRELOAD_C)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O2", f'-DMARKS="{marks}"', "-o", str(gates / "preload.so"),
                    str(source)], check=True, capture_output=True)
    holder = default.alice.submit(_job(
        "holder", f'cp {gates}/preload.so "$TRAINYARD_JOB_DIR/lib.so" && cp {gates}/preload.so {gates}/alice.so',
        'echo "placed $TRAINYARD_JOB_DIR/lib.so uid=$(id -u)"', "exec sleep 600")).id
    said = default.started(holder, "placed")
    library, uid = said.split()[1], said.split("uid=")[1]
    for path in (Path(library), gates / "alice.so"):
        assert path.stat().st_uid == int(uid)  # the user's own files, written by their task
    job = _job("preloaded", 'echo "preload=$LD_PRELOAD"')
    job["taskRoles"]["main"]["env"] = {"LD_PRELOAD": f"{library} {gates}/alice.so"}  # type: ignore[index]
    preloaded = default.alice.submit(job).id
    wait_until(lambda: default.alice.job(preloaded).state in ("SUCCEEDED", "FAILED"), timeout=120,
               what="the preloaded job to end")
    log = default.alice.logs(preloaded).decode()
    assert default.alice.job(preloaded).state == "SUCCEEDED", log
    by_uid: dict[str, list[str]] = {}
    for mark in marks.iterdir():
        uid_of, _pid, program = mark.name.split("-", 2)
        by_uid.setdefault(uid_of, []).append(program)
    assert "0" not in by_uid, f"the job's LD_PRELOAD ran as root in: {sorted(by_uid['0'])}"
    # The job's environment still reaches its task, and only the task's processes load it.
    assert f"preload={library} {gates}/alice.so" in log, log
    assert set(by_uid) == {uid} and "bash" in by_uid[uid], by_uid
    default.alice.stop(holder)
