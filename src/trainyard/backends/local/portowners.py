"""Whose process took a connection to a port on this machine, read from Linux /proc: the
check behind ``PortOwners`` (``backends/base.py``) for the local backend.

The server (root on the default install) has connected to a task's port and not yet sent
a byte. The kernel's socket tables (``/proc/net/tcp`` and ``tcp6``) hold the other end of
that connection: the entry whose local port is the task's and whose remote address is our
socket's own. Until a process accepts it, that entry has no inode, but it carries the uid
of the listening socket it came from (the kernel copies the listener's owner into the
sockets it accepts), so another account's listener is told apart at once. The listening
sockets on the port that could have taken it (the same table, the connection's address or
the wildcard) must then each be held, in ``/proc/<pid>/fd``, by a process of the task,
running as the task's account; once the end has been accepted, its holder too.

A process of the task is one in the task's cgroups (its own, or its container's, with
every cgroup under them), or, for a task without one, one descended from the task's
process (its process group leader, checked by start time). A sandboxed task has its own PID namespace, so whatever it
starts stays its descendant; a process that left the task without a cgroup to hold it is
not the task's any more, and its listener is refused like anyone's.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
import sys
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from trainyard.backends.local import procfs

LISTEN = 0x0A
# Connected ends of a connection we made: SYN_RECV (not yet fully in the accept queue),
# ESTABLISHED, and the closing states a listener that accepted and closed at once leaves.
CONNECTED = frozenset({0x01, 0x03, 0x04, 0x05, 0x08})
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# How many ports held by live tasks ``free_ports`` may pass over before it gives up.
MAX_TAKEN_SKIPPED = 1000


def free_ports(node: str, count: int, taken: Collection[int] = ()) -> list[int]:
    """``count`` distinct ports free on this machine now, none of them in ``taken``.

    Holding every socket until all are bound keeps the ports distinct, and a port in
    ``taken`` (a live task's, which may not listen yet or just now) stays bound while the
    kernel is asked again, so it is not handed out twice. Binding the wildcard address
    finds ports free on every interface, 127.0.0.1 included."""
    sockets: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < count:
            if len(sockets) >= count + MAX_TAKEN_SKIPPED:
                raise OSError(f"no free port on node {node} that no live task holds after {len(sockets)} tries")
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind(("", 0))
            port = sock.getsockname()[1]
            if port not in taken:
                ports.append(port)
        return ports
    finally:
        for sock in sockets:
            sock.close()


@dataclass(frozen=True)
class Entry:
    """One line of /proc/net/tcp or tcp6."""

    table: str  # "tcp" or "tcp6"
    local: tuple[IPAddress, int]
    remote: tuple[IPAddress, int]
    state: int
    uid: int
    inode: int


def _address(text: str) -> tuple[IPAddress, int]:
    """``0100007F:1F90`` (an IPv4 address as the kernel writes it: one 32-bit word in host
    order) or its IPv6 form (four such words), and the port in hex."""
    addr, port = text.split(":")
    raw = bytes.fromhex(addr)
    data = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4)) if sys.byteorder == "little" else raw
    ip: IPAddress = ipaddress.IPv4Address(data) if len(data) == 4 else ipaddress.IPv6Address(data)
    return ip, int(port, 16)


NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST_DUMP = 0x301
NLMSG_ERROR, NLMSG_DONE = 2, 3
WANTED_STATES = sum(1 << state for state in (LISTEN, *CONNECTED))


def entries(port: int, proc: str = "/proc") -> list[Entry]:
    """The TCP sockets of this network namespace listening or connected on ``port`` (their
    local end): from the kernel's sock_diag netlink interface, which filters by state in
    the kernel (reading /proc/net/tcp walks every socket and costs ~10 ms on a busy host);
    from /proc/net/tcp and tcp6 where netlink is not to be had."""
    try:
        return [e for family in (socket.AF_INET, socket.AF_INET6) for e in _diag(family) if e.local[1] == port]
    except OSError:
        return [e for e in _proc_entries(port, proc) if e.local[1] == port]


def _diag(family: int) -> list[Entry]:
    """A sock_diag dump of ``family``'s TCP sockets in WANTED_STATES (inet_diag_req_v2 in,
    inet_diag_msg out: linux/inet_diag.h)."""
    table = "tcp" if family == socket.AF_INET else "tcp6"
    size = 4 if family == socket.AF_INET else 16
    request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, WANTED_STATES) + bytes(48)
    found: list[Entry] = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as sock:
        sock.send(struct.pack("=IHHII", 16 + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST_DUMP, 1, 0) + request)
        while True:
            data = sock.recv(1 << 16)
            if not data:
                raise OSError("sock_diag: the dump ended early")
            offset = 0
            while offset + 16 <= len(data):
                length, kind = struct.unpack_from("=IH", data, offset)
                if kind == NLMSG_DONE:
                    return found
                if kind == NLMSG_ERROR or length < 16:
                    raise OSError(f"sock_diag answered with an error for {table}")
                body = data[offset + 16:offset + length]
                local_port, remote_port = struct.unpack_from(">HH", body, 4)
                uid, inode = struct.unpack_from("=II", body, 64)
                local = ipaddress.ip_address(body[8:8 + size])
                remote = ipaddress.ip_address(body[24:24 + size])
                found.append(Entry(table, (local, local_port), (remote, remote_port), body[1], uid, inode))
                offset += (length + 3) & ~3


def _proc_entries(port: int, proc: str = "/proc") -> list[Entry]:
    """Every TCP socket of this network namespace with ``port`` at one of its ends."""
    found = []
    needle = f":{port:04X} "
    for table in ("tcp", "tcp6"):
        try:
            with open(f"{proc}/net/{table}") as f:
                lines = f.readlines()[1:]
        except FileNotFoundError:  # no IPv6 in this kernel
            continue
        for line in lines:
            if needle not in line:
                continue
            fields = line.split()
            found.append(Entry(table, _address(fields[1]), _address(fields[2]), int(fields[3], 16), int(fields[7]),
                               int(fields[9])))
    return found


def _same(a: IPAddress, b: IPAddress) -> bool:
    """Whether two addresses name one end (an IPv4 address and its IPv4-mapped IPv6 form)."""
    def plain(ip: IPAddress) -> IPAddress:
        return ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None else ip
    return plain(a) == plain(b)


def accepted_end(port: int, ours: tuple[str, int], found: Iterable[Entry]) -> Entry | None:
    """The other end of our connection from ``ours`` to ``port``: what took it."""
    mine = ipaddress.ip_address(ours[0])
    for entry in found:
        if (entry.state in CONNECTED and entry.local[1] == port and entry.remote[1] == ours[1]
                and _same(entry.remote[0], mine)):
            return entry
    return None


def listeners(port: int, end: Entry, found: Iterable[Entry]) -> list[Entry]:
    """The listening sockets on ``port`` that could have handed out ``end``: in its table,
    bound to its address or to the wildcard."""
    return [e for e in found if e.state == LISTEN and e.table == end.table and e.local[1] == port
            and (e.local[0].is_unspecified or _same(e.local[0], end.local[0]))]


def cgroup_members(directories: Iterable[str]) -> set[int]:
    """The pids in each cgroup directory and in every cgroup under it."""
    pids: set[int] = set()
    for top in directories:
        for directory, _, files in os.walk(top):
            if "cgroup.procs" not in files:
                continue
            try:
                with open(os.path.join(directory, "cgroup.procs")) as f:
                    pids.update(int(line) for line in f if line.strip())
            except (OSError, ValueError):
                continue
    return pids


def descendants(leader: int, started: int, proc: str = "/proc") -> set[int]:
    """``leader`` (if it is still the process that started at ``started``) and every process
    descended from it now."""
    if procfs.start_time(leader) != started:
        return set()
    children: dict[int, list[int]] = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            with open(f"{proc}/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        parent = int(data[data.rindex(b")") + 2:].split()[1])
        children.setdefault(parent, []).append(int(name))
    found, todo = {leader}, [leader]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def effective_uid(pid: int, proc: str = "/proc") -> int | None:
    try:
        with open(f"{proc}/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[2])
    except OSError:
        return None
    return None


def socket_inodes(pids: Iterable[int], uid: int, proc: str = "/proc") -> set[int]:
    """The inodes of the sockets the processes ``pids`` that run as ``uid`` hold open."""
    held: set[int] = set()
    for pid in pids:
        if effective_uid(pid, proc) != uid:
            continue
        try:
            fds = os.listdir(f"{proc}/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{proc}/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                held.add(int(target[8:-1]))
    return held


@dataclass(frozen=True)
class TaskProcesses:
    """How to find a task's processes: its cgroup directories, and its process group's
    leader ``(pid, start time)``; and the account it runs as."""

    cgroups: tuple[str, ...]
    leader: tuple[int, int] | None
    uid: int

    @classmethod
    def of(cls, spec: dict[str, Any], leader: tuple[int, int] | None) -> TaskProcesses:
        """The task's, from its ``spec.json`` (its cgroup, its container's) and its recorded
        group leader."""
        cgroups = [spec["cgroup"]["memory"] or spec["cgroup"]["cpu"]] if spec.get("cgroup") else []
        container = spec.get("container") or {}
        if container.get("cgroup"):
            cgroups.append(container["cgroup"]["memory"])
        return cls(tuple(c for c in cgroups if c), leader, _owner_uid(spec))

    def pids(self) -> set[int]:
        """Its cgroups' members where it has cgroups (every process of the task is in them,
        and none can leave), else the leader's descendants (a walk of all of /proc)."""
        found = cgroup_members(self.cgroups)
        if not found and self.leader is not None:
            found = descendants(*self.leader)
        return found


def _owner_uid(spec: dict[str, Any]) -> int:
    """The account a task's processes run as, from its spec (older specs: from how it drops)."""
    for found in (spec.get("owner_uid"), (spec.get("sandbox_identity") or {}).get("uid"),
                  (spec.get("user") or {}).get("uid")):
        if isinstance(found, int):
            return found
    return os.geteuid()


def check(port: int, ours: tuple[str, int], task: TaskProcesses, what: str) -> str | None:
    """None when our connection from ``ours`` to ``port`` was taken by a listener of
    ``task``'s processes; otherwise why not, in words (``what`` names the task)."""
    found = entries(port)
    end = accepted_end(port, ours, found)
    refused = f"port {port} is held by another process, not by {what}: Trainyard does not forward to it"
    if end is None:
        return f"port {port}: the connection ended before it could be checked, so it was not used"
    if end.uid != task.uid:
        return refused + " (its listening socket is another account's)"
    heard = listeners(port, end, found)
    if not heard:
        return refused + " (no listening socket on the port handed out the connection)"
    held = socket_inodes(task.pids(), task.uid)
    for listener in heard:
        if listener.uid != task.uid or listener.inode not in held:
            return refused
    if end.inode and end.inode not in held:  # accepted already: by whom
        return refused
    return None
