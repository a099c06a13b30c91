"""Shared fixtures: a real database on SQLite and, when reachable, on PostgreSQL.

PostgreSQL runs when ``TRAINYARD_TEST_DATABASE_URL`` names one (``.ci/run`` starts it).
With ``TRAINYARD_REQUIRE_POSTGRES=1`` (set in CI) a missing or unreachable PostgreSQL
fails the run instead of being skipped.
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from deadlines import FACTOR, scaled
from hypothesis import settings
from sqlalchemy import create_engine, text

PG_URL = os.environ.get("TRAINYARD_TEST_DATABASE_URL")
REQUIRE_PG = os.environ.get("TRAINYARD_REQUIRE_POSTGRES") == "1"
TESTS = Path(__file__).parent


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


SLOW_TIMEOUT = 600  # seconds a test marked slow may take (times the factor), unless it says otherwise


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> object:
    """pytest-timeout's limit of a test (pyproject's ``timeout``, or a ``timeout`` marker),
    stretched by ``TRAINYARD_TEST_TIME_FACTOR`` like every other deadline (tests/deadlines.py)."""
    import pytest_timeout

    timeout = settings.timeout
    if item.get_closest_marker("slow") is not None and item.get_closest_marker("timeout") is None:
        timeout = max(timeout, SLOW_TIMEOUT)  # a whole replay: minutes of one core on a loaded machine
    return pytest_timeout.pytest_timeout_set_timer(item, settings._replace(timeout=scaled(timeout)))


def pytest_report_header(config: pytest.Config) -> str:
    return f"deadlines: TRAINYARD_TEST_TIME_FACTOR={FACTOR:g} (tests/deadlines.py)"


# The test directories whose every test runs on both databases: the store's own queries and
# the services and monitoring that are mostly queries. Elsewhere a test runs on SQLite, and
# on PostgreSQL too only when marked ``@pytest.mark.postgres``: a smoke of its layer there,
# or behaviour that differs between the two (locking, types, SQL functions).
BOTH_DATABASES = frozenset({"store", "services", "monitor"})


def _databases_for(metafunc: pytest.Metafunc) -> list[str]:
    top = Path(str(metafunc.definition.path)).relative_to(TESTS).parts[0]
    if top in BOTH_DATABASES or metafunc.definition.get_closest_marker("postgres") is not None:
        return ["sqlite", "postgresql"]
    return ["sqlite"]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "database_url" not in metafunc.fixturenames:
        return
    for mark in metafunc.definition.iter_markers("parametrize"):
        names = mark.args[0]
        if "database_url" in (names.replace(" ", "").split(",") if isinstance(names, str) else names):
            return  # the test names its databases itself
    metafunc.parametrize("database_url", _databases_for(metafunc), indirect=True)


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the marks into the test ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist (``-n``, ``--dist loadgroup``): a file's tests run in one worker, so
    that a module's server starts once; every end-to-end module marked ``idle_cluster`` runs
    in one worker, so that they share one server; and every Slurm test runs in one worker,
    the one cluster's (they drain its nodes and fill its GPUs)."""
    for item in items:
        parts = Path(str(item.path)).relative_to(TESTS).parts
        # A test file's name is unique in tests/; xdist appends the group to the test's id.
        item.add_marker(pytest.mark.xdist_group(_xdist_group(item, parts)))


def _xdist_group(item: pytest.Item, parts: tuple[str, ...]) -> str:
    """The test's xdist group: "slurm" for the Slurm tests, "e2e-idle" for the end-to-end
    modules marked ``idle_cluster`` (one worker runs them all, on the one server they share:
    tests/e2e/shared.py), else its file's."""
    if parts[:2] == ("backends", "slurm"):
        return "slurm"
    module = item.getparent(pytest.Module)
    if parts[0] == "e2e" and module is not None and module.get_closest_marker("idle_cluster") is not None:
        return "e2e-idle"
    return item.path.stem


class _Times:
    """Seconds spent per test directory (setup, call and teardown summed), printed at the end
    of every run so that the suite's budget stays visible (``.ci/run`` shows it)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.tests: dict[str, set[str]] = {}

    def add(self, report: pytest.TestReport) -> None:
        parts = report.nodeid.split("::", 1)[0].split("/")
        folder = "/".join(parts[1:-1]) if parts[0] == "tests" and len(parts) > 2 else "(top)"
        self.seconds[folder] = self.seconds.get(folder, 0.0) + report.duration
        self.tests.setdefault(folder, set()).add(report.nodeid)


_TIMES = _Times()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _TIMES.add(report)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not _TIMES.seconds or getattr(config, "workerinput", None) is not None:
        return
    lines = [f"{folder:<24} {len(_TIMES.tests[folder]):5d} tests {seconds:8.1f} s"
             for folder, seconds in sorted(_TIMES.seconds.items(), key=lambda kv: -kv[1])]
    lines.append(f"{'total':<24} {sum(map(len, _TIMES.tests.values())):5d} tests {sum(_TIMES.seconds.values()):8.1f} s")
    terminalreporter.section("time per test directory (seconds of tests, summed over workers)")
    for line in lines:
        terminalreporter.write_line(line)
    if target := os.environ.get("TRAINYARD_TEST_TIMES_FILE"):  # .ci/run prints it again at its very end
        Path(target).write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file migrated to the newest revision once per run; each test gets a copy
    (a copy costs a millisecond, the 21 migrations a quarter of a second)."""
    from trainyard.store.db import Database

    path = tmp_path_factory.mktemp("template") / "trainyard.db"
    database = Database(f"sqlite:///{path}")
    database.migrate()
    database.dispose()
    return path


@pytest.fixture
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database: a SQLite file, or a private schema in PostgreSQL."""
    if getattr(request, "param", "sqlite") == "sqlite":
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
def db(database_url: str, request: pytest.FixtureRequest):
    """A migrated ``Database`` on each of the databases of ``database_url``: on SQLite a copy
    of the migrated template, not migrated again (Alembic finding nothing to do still reads
    every migration file: 20 ms a test)."""
    from trainyard.store.db import Database

    sqlite = database_url.startswith("sqlite:///")
    if sqlite:
        shutil.copyfile(request.getfixturevalue("_sqlite_template"), database_url.removeprefix("sqlite:///"))
    database = Database(database_url)
    if not sqlite:
        database.migrate()
    yield database
    database.dispose()


# Test directories whose tests reach the portal's passwords in this process.
CHEAP_PASSWORDS = frozenset({"api", "portal", "cli", "client", "controller", "services", "store"})


@pytest.fixture(autouse=True)
def _cheap_password_hashes(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """scrypt at N=2**10 instead of 2**15 in process: a hash carries its parameters, so the
    same code signs in and checks, at a 32nd of the cost (a portal test hashes three or
    four times: 0.1 s each on an idle core). ``test_passwords_are_hashed_at_the_real_cost``
    checks the real parameters; real servers (tests/e2e) always use them."""
    if Path(str(request.node.path)).relative_to(TESTS).parts[0] not in CHEAP_PASSWORDS:
        return
    if request.node.get_closest_marker("real_password_cost") is not None:
        return
    from trainyard.services import passwords

    monkeypatch.setattr(passwords, "SCRYPT_N", 1 << 10)


@pytest.fixture(autouse=True)
def _apps_given_back() -> Iterator[None]:
    """The API harness lends one process's apps to one test at a time (tests/api/harness.py):
    this test's are given back once everything else of it has ended."""
    yield
    if (harness := sys.modules.get("api.harness")) is not None:
        harness.return_apps()


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


@pytest.fixture
def make_world(db, tmp_path: Path):
    """Builds controller test worlds (``tests/worlds.py``: this test's store, the real local
    backend under ``tmp_path``, a controller, users), e.g. ``make_world(gpus=2, clock=FakeClock())``;
    each is closed at the end (its controller stopped, its tasks killed)."""
    from worlds import build_world

    made = []

    def make(**options: Any):
        made.append(build_world(db, tmp_path, **options))
        return made[-1]

    yield make
    for world in reversed(made):
        world.close()
