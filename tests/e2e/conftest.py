from __future__ import annotations

from collections.abc import Iterator

import pytest

from e2e.server import Server, running_server


@pytest.fixture
def server(database_url: str, tmp_path_factory) -> Iterator[Server]:
    url = None if database_url.startswith("sqlite") else database_url
    with running_server(tmp_path_factory.mktemp("home"), gpus=4, database_url=url) as srv:
        yield srv
