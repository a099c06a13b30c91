"""Shared fixtures: a real database on SQLite and, when reachable, on PostgreSQL.

PostgreSQL runs when ``TRAINYARD_TEST_DATABASE_URL`` names one (``.ci/run`` starts it).
With ``TRAINYARD_REQUIRE_POSTGRES=1`` (set in CI) a missing or unreachable PostgreSQL
fails the run instead of being skipped.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from deadlines import FACTOR, scaled
from hypothesis import settings
from sqlalchemy import create_engine, text

PG_URL = os.environ.get("TRAINYARD_TEST_DATABASE_URL")
REQUIRE_PG = os.environ.get("TRAINYARD_REQUIRE_POSTGRES") == "1"


def _sqlalchemy_url(url: str) -> str:
    return "postgresql+psycopg://" + url.split("://", 1)[1] if url.startswith("postgresql://") else url


# CI runs the property tests on a fixed seed, so that its verdict is reproducible; a
# developer's run explores new examples (and keeps failing ones in .hypothesis/). In neither
# has an example a deadline: how long one takes is how busy the machine is (timings are
# benchmarks), and pytest-timeout still ends a test that hangs.
settings.register_profile("dev", deadline=None)
settings.register_profile("ci", derandomize=True, deadline=None)
settings.load_profile("ci" if os.environ.get("HYPOTHESIS_PROFILE") == "ci" or os.environ.get("CI") else "dev")


def pytest_configure(config: pytest.Config) -> None:
    if REQUIRE_PG and not PG_URL:
        raise pytest.UsageError("TRAINYARD_REQUIRE_POSTGRES=1 but TRAINYARD_TEST_DATABASE_URL is not set")


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> object:
    """pytest-timeout's limit of a test (pyproject's ``timeout``, or a ``timeout`` marker),
    stretched by ``TRAINYARD_TEST_TIME_FACTOR`` like every other deadline (tests/deadlines.py)."""
    import pytest_timeout

    return pytest_timeout.pytest_timeout_set_timer(item, settings._replace(timeout=scaled(settings.timeout)))


def pytest_report_header(config: pytest.Config) -> str:
    return f"deadlines: TRAINYARD_TEST_TIME_FACTOR={FACTOR:g} (tests/deadlines.py)"


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    """A fresh, empty database: a SQLite file, or a private schema in PostgreSQL."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'trainyard.db'}"
        return
    if not PG_URL:
        pytest.skip("PostgreSQL not configured (set TRAINYARD_TEST_DATABASE_URL)")
    schema = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(_sqlalchemy_url(PG_URL))
    try:
        with admin.begin() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    except Exception as exc:  # noqa: BLE001
        if REQUIRE_PG:
            raise
        pytest.skip(f"PostgreSQL unreachable: {exc}")
    sep = "&" if "?" in PG_URL else "?"
    try:
        yield f"{PG_URL}{sep}options=-csearch_path%3D{schema}"
    finally:
        with admin.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


@pytest.fixture
def db(database_url: str):
    """A migrated ``Database`` on each of the databases of ``database_url``."""
    from trainyard.store.db import Database

    database = Database(database_url)
    database.migrate()
    yield database
    database.dispose()


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch):
    """THE NVML stand-in (``tests/standins/nvml.py``): a fake machine of eight H100s behind pynvml."""
    from standins.nvml import FakeNvml

    machine = FakeNvml()
    machine.install(monkeypatch)
    return machine


@pytest.fixture(scope="session")
def image() -> str:
    """The container test image (``podman_support.build_test_image``: built once, cached)."""
    from podman_support import build_test_image

    return build_test_image()
