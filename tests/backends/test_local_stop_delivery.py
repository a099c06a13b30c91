"""A stop reaches the task however close to the supervisor's or the waiter's sleep it lands.

The cause of the stops CI lost (issue 28): the supervisor and the waiter are Python, whose
signal handlers run between bytecodes. A process asleep in a system call learns of a
signal only when the signal interrupts that call; a signal that lands after the
interpreter's last look and before the process sleeps interrupts nothing, so its handler
waited for the call to return: for the waiter, until the task ended on its own. Seen in
CI and in a stress run of stops sent as tasks start (5 of about 1,500 lost): in each one
traced, the supervisor had forwarded the stop, and the waiter ran its handler only when
another signal woke it.

Each test constructs that state exactly instead of hoping for it: a thread of the process
(the supervisor, or the waiter) waits until the task runs and the process's main thread
sleeps in its wait, then delivers SIGTERM to itself. The handler is tripped as it is by a
stop that lands in that window, and the main thread's sleep is not interrupted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from deadlines import scaled

from trainyard.backends.local import procfs, taskfiles

# Runs a supervisor on the task directory argv[2]; argv[1] names the process (supervisor or
# waiter) whose stop lands just before it sleeps.
_TRIPPED_SUPERVISOR = r"""
import os, signal, sys, threading, time
from trainyard.backends.local import supervisor, taskfiles
from trainyard.backends.local.records import stop_request

who, task_dir = sys.argv[1], sys.argv[2]
FUTEX = {"x86_64": "202", "aarch64": "98"}.get(os.uname().machine)


def asleep(tid):
    # Asleep in a system call, not waiting for the GIL (a futex): in its wait.
    with open(f"/proc/self/task/{tid}/stat") as f:
        state = f.read().rsplit(")", 1)[1].split()[0]
    with open(f"/proc/self/task/{tid}/wchan") as f:
        wchan = f.read()
    with open(f"/proc/self/task/{tid}/syscall") as f:
        call = f.read().split()[0]
    return state == "S" and "futex" not in wchan and call != FUTEX


def task_runs():
    try:
        with open(os.path.join(task_dir, taskfiles.OUTPUT_LOG)) as f:
            return "ready" in f.read()
    except FileNotFoundError:
        return False


def stop_when_asleep():
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})  # a waiter's thread starts with it blocked
    main = os.getpid()
    while not (task_runs() and asleep(main)):
        time.sleep(0.005)
    # What the backend's stop does, but the signal lands on this thread.
    taskfiles.write_json(os.path.join(task_dir, taskfiles.STOP), stop_request(None, 30.0, time.time()))
    signal.pthread_kill(threading.get_ident(), signal.SIGTERM)


def start_stopper():
    threading.Thread(target=stop_when_asleep, daemon=True).start()


if who == "waiter":
    run = supervisor.Waiter.run

    def run_with_stopper(self, *args):
        start_stopper()
        run(self, *args)

    supervisor.Waiter.run = run_with_stopper
else:
    start_stopper()
sys.exit(supervisor.main(["supervisor", task_dir]))
"""


@pytest.mark.parametrize("who", ["supervisor", "waiter"])
def test_a_stop_landing_just_before_the_process_sleeps_still_reaches_the_task(local, who):
    key = local.new_key()
    task_dir = local.backend.task_dir(key)
    task_dir.mkdir(parents=True)
    script = "trap 'echo got TERM; exit 0' TERM\necho ready\nsleep 300 & wait"
    spec = {"script": script, "env": {"PATH": os.defpath}, "cwd": str(task_dir), "shell": "/bin/bash",
            "grace_seconds": 30}
    taskfiles.write_json(str(task_dir / taskfiles.SPEC), spec)
    with open(task_dir / taskfiles.SUPERVISOR_LOG, "ab") as log:
        process = subprocess.Popen([sys.executable, "-c", _TRIPPED_SUPERVISOR, who, str(task_dir)],
                                   stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        # Before the fix: the SIGTERM waited in the sleeping process's handler until the
        # task ended on its own (300 s), or until the stop was repeated past its deadline.
        status = local.wait_ended(key)
        assert (status.exit_code, status.signal) == (0, None)
        assert local.log(key) == "ready\ngot TERM\n"
        assert process.wait(timeout=scaled(10)) == 0
    finally:
        record = taskfiles.read_json(str(task_dir / taskfiles.PID)) or {}
        if task := record.get("task"):
            procfs.signal_group(task["pgid"], task["start_time"], signal.SIGKILL)
        if process.poll() is None:
            process.kill()
            process.wait()
