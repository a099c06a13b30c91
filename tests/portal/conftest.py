from __future__ import annotations

from collections.abc import Iterator

import pytest
from api.harness import Api

from portal.harness import make_portal_api


@pytest.fixture
def api(db, tmp_path) -> Iterator[Api]:
    yield make_portal_api(db, tmp_path / "local")
