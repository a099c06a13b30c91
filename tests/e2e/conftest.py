from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.server import Server, free_port


@pytest.fixture
def server(database_url: str, tmp_path_factory) -> Iterator[Server]:
    home = tmp_path_factory.mktemp("home")
    srv = Server(home=home, port=free_port(),
                 database_url=None if database_url.startswith("sqlite") else database_url, gpus=4)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()
        srv.kill_tasks()
