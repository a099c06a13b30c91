from __future__ import annotations

from collections.abc import Iterator

import pytest
from api.harness import Api, make_api


@pytest.fixture
def api(db, tmp_path) -> Iterator[Api]:
    yield make_api(db, tmp_path / "local")
