from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.server import Server, running_server, shared_folder


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
    folder = shared_folder("gates-")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


# The portal's browser tests: Debian's chromium through Playwright (tests/e2e/browser.py).
from e2e.browser import browser_page, chromium  # noqa: E402, F401
