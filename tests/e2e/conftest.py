from __future__ import annotations

import shutil
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

from e2e.server import Server, running_server, shared_folder
from e2e.shared import FAILED, SharedServers, shared_server


@pytest.fixture(scope="module")
def shared_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedServers]:
    """The module's shared servers (tests/e2e/shared.py), stopped when the module ends."""
    servers = SharedServers(tmp_path_factory)
    try:
        yield servers
    finally:
        servers.close()


# The worker's shared servers, once a test asked for them (``worker_servers``).
WORKER_SERVERS = pytest.StashKey[SharedServers]()


@pytest.fixture(scope="session")
def worker_servers(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[SharedServers]:
    """The servers the modules marked ``idle_cluster`` share (tests/e2e/shared.py), stopped
    when the worker's session ends, or under xdist once its last such test is done."""
    servers = request.config.stash[WORKER_SERVERS] = SharedServers(tmp_path_factory)
    try:
        yield servers
    finally:
        servers.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    """Under xdist, one worker runs the ``idle_cluster`` modules one after another (their
    xdist group, tests/conftest.py): after the last of them, it stops their shared servers
    rather than leave them idling through the rest of its run (~0.8 s of CPU a minute each).
    In one process (-n 0) those modules come between others, and the servers last the run.
    The browser those modules share (browser.py) is closed before any other test, either way."""
    result = yield
    leaving = nextitem is None or nextitem.get_closest_marker("idle_cluster") is None
    if leaving:  # in one process too: the next test may run an event loop (browser.py)
        close_shared_browser(item.config)
    servers = item.config.stash.get(WORKER_SERVERS, None)
    if servers is not None and hasattr(item.config, "workerinput") and leaving:
        servers.close()
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Notes a test whose setup or call failed, for ``server`` to discard its shared server."""
    report = yield
    if report.failed:
        item.stash[FAILED] = True
    return report


@pytest.fixture
def server(request: pytest.FixtureRequest, database_url: str, tmp_path_factory) -> Iterator[Server]:
    """A running ``yard up`` with 4 GPUs, idle when the test starts.

    By default the test's own, on each database of ``database_url``. In a module marked
    ``shares_server`` (or a test so marked), a test on SQLite gets instead the module's one
    server of its group (``shares_server("name")``: another than the unnamed one's), handed
    back idle after it (tests/e2e/shared.py); in a module marked ``idle_cluster``, the
    worker's one, which every such module shares. A test there that needs a server of its
    own (it restarts or stops it, counts every job or a counter since the start, ...) is
    marked ``own_server``."""
    share = request.node.get_closest_marker("shares_server") or request.node.get_closest_marker("idle_cluster")
    if share is None or request.node.get_closest_marker("own_server") is not None or not database_url.startswith(
            "sqlite"):
        url = None if database_url.startswith("sqlite") else database_url
        with running_server(tmp_path_factory.mktemp("home"), gpus=4, database_url=url) as srv:
            yield srv
        return
    yield from shared_server(request, share.args[0] if share.args else "")


@pytest.fixture
def gates() -> Iterator[Path]:
    """A folder the test and its jobs' tasks both reach, to hand files back and forth.

    Not pytest's tmp_path: on the default install a task has a private /tmp (and /var/tmp)
    and runs as its user's own OS account, so the folder sits elsewhere and anyone may
    write to it (sticky, as /tmp is).
    """
    folder = shared_folder("gates-")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


# The portal's browser tests: Debian's chromium through Playwright (tests/e2e/browser.py).
from e2e.browser import browser_page, chromium, close_shared_browser  # noqa: E402, F401
