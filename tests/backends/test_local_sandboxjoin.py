"""The sandbox's user-namespace filter (``sandboxjoin.user_namespace_filter``), in this
process's children and in a real bubblewrap sandbox as root."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from deadlines import scaled

from trainyard.backends import sandboxjoin
from trainyard.backends.sandbox import USERNS_FILTER_FILE, Identity, find_sandbox, sandbox_argv

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (bwrap as root, as the default install)")
NOBODY = 65534
CLONE_NEWNS = 0x00020000


def _in_filtered_child(check) -> int:  # type: ignore[no-untyped-def]
    """Run ``check`` in a child with the filter; its exit status (0: every check held)."""
    program = sandboxjoin.user_namespace_filter()
    assert program is not None
    pid = os.fork()
    if pid == 0:
        try:
            sandboxjoin.install_filter(ctypes.CDLL(None, use_errno=True), program)
            os._exit(0 if check() else 1)
        except BaseException:  # noqa: BLE001 - a forked test child must never return
            os._exit(2)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_the_filter_refuses_user_namespaces_and_clone3_and_keeps_threads_and_processes() -> None:
    def check() -> bool:
        libc = ctypes.CDLL(None, use_errno=True)
        results = []
        for call in (lambda: libc.unshare(sandboxjoin.CLONE_NEWUSER),
                     lambda: libc.unshare(sandboxjoin.CLONE_NEWUSER | CLONE_NEWNS),
                     lambda: libc.setns(0, 0), lambda: libc.setns(0, sandboxjoin.CLONE_NEWUSER)):
            results.append((call(), ctypes.get_errno()))
        results.append((libc.syscall(435, 0, 0), ctypes.get_errno()))  # clone3
        thread = threading.Thread(target=lambda: None)
        thread.start()
        thread.join()
        spawned = subprocess.run(["sh", "-c", "echo spawned"], capture_output=True, text=True).stdout
        return results == [(-1, errno.EPERM)] * 4 + [(-1, errno.ENOSYS)] and spawned == "spawned\n"

    assert _in_filtered_child(check) == 0


def test_the_filter_checks_the_architecture_and_knows_two_machines() -> None:
    x86 = sandboxjoin.user_namespace_filter("x86_64")
    arm = sandboxjoin.user_namespace_filter("aarch64")
    assert x86 is not None and arm is not None and x86 != arm and len(x86) % 8 == 0
    # The first instruction loads the architecture, and a foreign one is killed.
    assert x86[:8] == bytes.fromhex("2000000004000000")
    assert (0x80000000).to_bytes(4, "little") in x86
    assert sandboxjoin.user_namespace_filter("riscv64") is None


@needs_bwrap
@needs_root
@pytest.mark.parametrize("allowed", [False, True], ids=["default", "task_user_namespaces"])
def test_a_task_in_the_root_sandbox_makes_a_user_namespace_only_when_allowed(tmp_path: Path, allowed: bool) -> None:
    work, shm, state = tmp_path / "work", tmp_path / "shm", tmp_path / "state"
    for folder in (work, shm, state):
        folder.mkdir()
    os.chown(work, NOBODY, NOBODY)
    tmp_path.chmod(0o755)
    sandbox, why = find_sandbox("bwrap", as_root=True, allow_userns=allowed)
    assert sandbox is not None, why
    argv = sandbox_argv(sandbox, ["/bin/sh", "-c", "unshare -Ur id -u && echo made || echo refused"], hidden=(),
                        work_dir=work, shm_dir=shm, stop_file=state / "stop.json", spec_file=state / "spec.json",
                        identity=Identity(NOBODY, NOBODY, ()))
    (state / "spec.json").write_text(json.dumps({"env": {"PATH": "/usr/bin:/bin"}}))
    done = subprocess.run(argv, capture_output=True, text=True, timeout=scaled(30), cwd="/",
                          env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == ("made" if allowed else "refused"), done
    assert (state / USERNS_FILTER_FILE).exists() is not allowed
