"""Connections to a task's port that the task itself took: the server sends a user's request
(and a session's JupyterLab token) to a task's port only on a connection that the backend
has checked was accepted by that task's own processes (``PortOwners``, docs/security.md
"A task's ports").

Every way in uses it: the port proxy and the session way in through an HTTP client whose
new connections are checked before their first byte (:func:`checked_async_transport`,
:func:`checked_transport`), told which task a request is for by :data:`expected`; the
WebSocket proxy and the port-forward tunnel connect with :func:`open_checked` and
:func:`check_socket`. A kept-alive connection is used again only for the task it was
checked for. A refused connection is closed unused, and the caller answers as for a port
nobody listens on (502), saying the port is held by another process.
"""

from __future__ import annotations

import socket
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import anyio
import httpcore
import httpx

from trainyard.backends.base import Backend, PortOwners, TaskKey


@dataclass(frozen=True)
class Owner:
    """The task a connection is meant for, and the backend that can check it."""

    owners: PortOwners
    key: TaskKey
    node: str

    @property
    def identity(self) -> tuple[TaskKey, str]:
        return self.key, self.node


def owner_of(backend: Backend, key: TaskKey, node: str) -> Owner | None:
    """The check for task ``key``'s ports, or None where the backend cannot make one."""
    return Owner(backend, key, node) if isinstance(backend, PortOwners) else None


class NotTheTasks(httpcore.ConnectError):
    """The connection to a task's port was taken by another process; its message says so.
    A ConnectError, so httpx raises ``httpx.ConnectError`` from it."""


# The task the current request's connections are for (None: not checked).
expected: ContextVar[Owner | None] = ContextVar("trainyard_expected_port_owner", default=None)


def check_socket(owner: Owner, sock: socket.socket, port: int) -> None:
    """NotTheTasks unless the connection ``sock`` made to ``port`` was taken by the task.
    Blocking: it reads the node's process tables."""
    ours = sock.getsockname()
    why = owner.owners.check_connection(owner.key, owner.node, port, (str(ours[0]), int(ours[1])))
    if why is not None:
        raise NotTheTasks(why)


def open_checked(host: str, port: int, owner: Owner | None, timeout: float) -> socket.socket:
    """A connection to ``host:port`` that the task took (when ``owner`` can check it);
    OSError when nothing answers, NotTheTasks when another process did. Blocking."""
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        if owner is not None:
            check_socket(owner, sock, port)
    except BaseException:
        sock.close()
        raise
    return sock


class _CheckedAsyncStream(httpcore.AsyncNetworkStream):
    """A connection checked for one task: it carries nothing for another."""

    def __init__(self, inner: httpcore.AsyncNetworkStream, checked_for: tuple[TaskKey, str] | None) -> None:
        self._inner = inner
        self._for = checked_for

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(max_bytes, timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        now = expected.get()
        if (None if now is None else now.identity) != self._for:
            raise httpcore.WriteError("this connection was checked for another task's port")
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                        timeout: float | None = None) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("a task's port is reached without TLS")

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _CheckingAsyncBackend(httpcore.AsyncNetworkBackend):
    def __init__(self, inner: httpcore.AsyncNetworkBackend) -> None:
        self._inner = inner

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options: Any = None) -> httpcore.AsyncNetworkStream:
        stream = await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        owner = expected.get()
        if owner is not None:
            try:
                await anyio.to_thread.run_sync(check_socket, owner, stream.get_extra_info("socket"), port)
            except BaseException:
                await stream.aclose()
                raise
        return _CheckedAsyncStream(stream, None if owner is None else owner.identity)

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Any = None) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("a task's port is a TCP port")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _CheckedStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, checked_for: tuple[TaskKey, str] | None) -> None:
        self._inner = inner
        self._for = checked_for

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        now = expected.get()
        if (None if now is None else now.identity) != self._for:
            raise httpcore.WriteError("this connection was checked for another task's port")
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("a task's port is reached without TLS")

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _CheckingBackend(httpcore.NetworkBackend):
    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Any = None) -> httpcore.NetworkStream:
        stream = self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        owner = expected.get()
        if owner is not None:
            try:
                check_socket(owner, stream.get_extra_info("socket"), port)
            except BaseException:
                stream.close()
                raise
        return _CheckedStream(stream, None if owner is None else owner.identity)

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Any = None) -> httpcore.NetworkStream:
        raise httpcore.ConnectError("a task's port is a TCP port")

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def checked_async_transport(**options: Any) -> httpx.AsyncHTTPTransport:
    """httpx's transport (``options`` as it takes them), its new connections checked."""
    transport = httpx.AsyncHTTPTransport(**options)
    pool = transport._pool  # httpcore's pool; its network backend makes every connection
    pool._network_backend = _CheckingAsyncBackend(pool._network_backend)
    return transport


def checked_transport(**options: Any) -> httpx.HTTPTransport:
    """The synchronous :func:`checked_async_transport`."""
    transport = httpx.HTTPTransport(**options)
    pool = transport._pool
    pool._network_backend = _CheckingBackend(pool._network_backend)
    return transport
