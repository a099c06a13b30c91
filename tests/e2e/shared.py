"""``yard up``s shared by the tests of one module, or of every module that needs only an
idle cluster (``tests/e2e/conftest.py``'s ``server``).

A ``yard up`` costs an end-to-end test 5-15 s of a loaded 2-core machine, most of it imports
and migrations, while most tests need only an idle cluster. A module's tests may therefore
share a server per group: started when a test first asks for it, handed back idle after
each test (``clean_slate``), stopped when the module ends. A module marked ``idle_cluster``
goes further: its tests share the worker's server of their group and options with every
other such module (tests/conftest.py puts those modules in one xdist group, so that one
worker runs them all), stopped when the worker's session ends. A test that fails, or whose
server ``clean_slate`` cannot make idle, takes the server with it: the next test gets a new
one, so that a failure stays in its test instead of leaving what it left to the tests after
it. A test that restarts its server with other settings says so (``spend``): the server
goes with it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from e2e.server import Server, clean_slate, running_server

# Set on a test whose setup or call failed (conftest.py's pytest_runtest_makereport).
FAILED = pytest.StashKey[bool]()
# Set by a test that restarted its shared server with other settings (``spend``).
SPENT = pytest.StashKey[bool]()


def spend(request: pytest.FixtureRequest) -> None:
    """This test changed its shared server past what ``clean_slate`` puts back (restarted it
    with other settings): the server is stopped after the test, not handed on, and the next
    test to ask gets a new one."""
    request.node.stash[SPENT] = True


# A shared server's key: its group and the options it was started with.
Key = tuple[str, str]


def server_key(group: str, options: dict[str, Any]) -> Key:
    return group, repr(sorted(options.items()))


class SharedServers:
    """Shared servers, one per group and options (a module's, or a worker's)."""

    def __init__(self, tmp_path_factory: pytest.TempPathFactory) -> None:
        self._homes = tmp_path_factory
        self._running: dict[Key, tuple[ExitStack, Server]] = {}

    def get(self, group: str, **options: Any) -> Server:
        """The running server of ``group`` started with ``options`` (``running_server``'s;
        SQLite, 4 GPUs unless they say otherwise), started now if there is none."""
        key = server_key(group, options)
        if key not in self._running:
            stack = ExitStack()
            home = self._homes.mktemp("home")
            self._running[key] = stack, stack.enter_context(running_server(home, **{"gpus": 4, **options}))
        srv = self._running[key][1]
        assert srv.process is not None and srv.process.poll() is None, (
            "the shared yard up exited during the test before:\n" + srv.log()[-3000:])
        return srv

    def discard(self, key: Key) -> None:
        """Stop the server of ``key`` (and its tasks): the next test to ask gets a new one."""
        if key in self._running:
            self._running.pop(key)[0].close()

    def close(self) -> None:
        for group in list(self._running):
            self.discard(group)


def shared_server(request: pytest.FixtureRequest, group: str = "", **options: Any) -> Iterator[Server]:
    """For a function-scoped fixture to ``yield from``: the module's server of ``group`` and
    ``options`` (``SharedServers.get``), or the worker's in a module marked ``idle_cluster``,
    for this test, made idle after it, or discarded if it failed."""
    across = request.node.get_closest_marker("idle_cluster") is not None
    servers: SharedServers = request.getfixturevalue("worker_servers" if across else "shared_servers")
    srv = servers.get(group, **options)
    yield srv
    key = server_key(group, options)
    if request.node.stash.get(FAILED, False) or request.node.stash.get(SPENT, False):
        servers.discard(key)
        return
    try:
        clean_slate(srv)
    except BaseException:
        servers.discard(key)
        raise
