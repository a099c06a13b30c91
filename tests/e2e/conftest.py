from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.server import Server, running_server

# Outside /tmp, /var/tmp and the server's home, which tasks do not see.
GATES_BASE = Path("/var/lib/trainyard-e2e") if os.geteuid() == 0 else Path.home() / ".cache" / "trainyard-e2e"


@pytest.fixture
def server(database_url: str, tmp_path_factory) -> Iterator[Server]:
    url = None if database_url.startswith("sqlite") else database_url
    with running_server(tmp_path_factory.mktemp("home"), gpus=4, database_url=url) as srv:
        yield srv


@pytest.fixture
def gates() -> Iterator[Path]:
    """A folder the test and its jobs' tasks both reach, to hand files back and forth.

    Not pytest's tmp_path: on the default install a task has a private /tmp (and /var/tmp)
    and runs as its user's own OS account, so the folder sits elsewhere and anyone may
    write to it (sticky, as /tmp is).
    """
    GATES_BASE.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="gates-", dir=GATES_BASE))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


# The portal's browser tests: Debian's chromium through Playwright (tests/e2e/browser.py).
from e2e.browser import browser_page, chromium  # noqa: E402, F401
