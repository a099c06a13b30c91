"""A task's port is its task's (issue 27, finding 4), in process on real sockets: the local
backend's ``check_connection`` says yes only when the task's own processes took the
connection, and the allocator passes over ports that live tasks hold. The end-to-end test
is tests/e2e/test_attack_ports_e2e.py."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from trainyard.backends.local import portowners, procfs

LISTENER = (
    "import socket, sys, os\n"
    "uid = int(sys.argv[1])\n"
    "if uid >= 0: os.setuid(uid)\n"
    "s = socket.socket(); s.bind(('0.0.0.0', int(sys.argv[2]))); s.listen()\n"
    "print(s.getsockname()[1], flush=True)\n"
    "sys.stdin.read()\n"
)


@pytest.fixture
def listeners() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def listen(started: list[subprocess.Popen[str]], uid: int = -1, port: int = 0) -> tuple[subprocess.Popen[str], int]:
    process = subprocess.Popen([sys.executable, "-c", LISTENER, str(uid), str(port)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    started.append(process)
    assert process.stdout is not None
    return process, int(process.stdout.readline())


def task_of(process: subprocess.Popen[str], uid: int | None = None) -> portowners.TaskProcesses:
    started = procfs.start_time(process.pid)
    assert started is not None
    return portowners.TaskProcesses((), (process.pid, started), os.geteuid() if uid is None else uid)


def check(port: int, task: portowners.TaskProcesses) -> str | None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        host, ours = sock.getsockname()[:2]
        return portowners.check(port, (host, ours), task, "task main/0")


def test_a_connection_the_tasks_own_listener_took_passes(listeners) -> None:
    process, port = listen(listeners)
    assert check(port, task_of(process)) is None


def test_a_listener_of_a_process_outside_the_task_is_refused(listeners) -> None:
    squatter, port = listen(listeners)
    task, _ = listen(listeners)  # the task: it listens elsewhere
    why = check(port, task_of(task))
    assert why is not None and why.startswith(f"port {port} is held by another process, not by task main/0")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to listen as another account")
def test_another_accounts_listener_is_refused_by_the_uid_the_kernel_keeps_on_the_accepted_end(listeners) -> None:
    squatter, port = listen(listeners, uid=65534)
    # Even were the squatter counted among the task's processes, its socket is nobody's.
    why = check(port, task_of(squatter, uid=os.geteuid()))
    assert why is not None and "another account" in why


def test_nothing_accepted_means_no_connection_to_check(listeners) -> None:
    process, port = listen(listeners)
    why = portowners.check(port, ("127.0.0.1", 1), task_of(process), "task main/0")
    assert why is not None and "ended before it could be checked" in why


def test_addresses_read_as_the_kernel_writes_them() -> None:
    assert portowners._address("0100007F:1F90") == (portowners.ipaddress.IPv4Address("127.0.0.1"), 8080)
    mapped = portowners._address("0000000000000000FFFF00000100007F:0050")
    assert mapped[1] == 80 and portowners._same(mapped[0], portowners.ipaddress.IPv4Address("127.0.0.1"))


def test_the_allocator_passes_over_ports_live_tasks_hold(local) -> None:
    low, high = (int(p) for p in open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    taken = set(range(low, (low + high) // 2))
    ports = local.backend.allocate_ports(local.node, 5, taken)
    assert len(set(ports)) == 5 and not taken.intersection(ports)
    with pytest.raises(OSError, match="that no live task holds"):
        local.backend.allocate_ports(local.node, 1, set(range(65536)))


def test_the_backend_checks_a_running_tasks_own_listener(local) -> None:
    key = local.launch("exec python3 -c \"import socket,time; s=socket.socket(); s.bind(('0.0.0.0', 0)); s.listen(); "
                       "print('port', s.getsockname()[1], flush=True); time.sleep(60)\"")
    local.wait_log(key, "port ")
    port = int(local.log(key).split()[1])
    other = local.launch("echo up; exec sleep 60")
    local.wait_log(other, "up")
    with socket.create_connection(("127.0.0.1", port)) as sock:
        ours = sock.getsockname()[:2]
        assert local.backend.check_connection(key, local.node, port, ours) is None
        why = local.backend.check_connection(other, local.node, port, ours)
        assert why is not None and "held by another process, not by task worker/0" in why
    for k in (key, other):
        local.backend.stop(k, 0)
