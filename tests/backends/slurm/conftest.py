"""Fixtures for tests against a real Slurm cluster (``scripts/dev-slurm.sh start``).

The cluster is found through ``SLURM_CONF``. Without a reachable one these tests are
skipped, unless ``TRAINYARD_REQUIRE_SLURM=1`` (set in CI), which makes them fail.
Each test gets its own store and Slurm state directory; at its end every Slurm job it
submitted is cancelled and awaited, and every node it drained is resumed, so that the
next test finds the whole cluster free.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from e2e.server import Server

from slurm.cluster import cancel_all, slurm_yard_up
from trainyard.backends.containers import ContainerEngine
from trainyard.backends.sandbox import find_sandbox
from trainyard.backends.slurm.backend import SlurmBackend
from trainyard.backends.slurm.commands import SlurmCommands, SlurmError
from trainyard.backends.taskaccounts import TaskAccounts
from trainyard.controller.loop import Controller
from trainyard.core.clock import SystemClock
from trainyard.services import auth
from trainyard.services.workdirs import WorkdirStore
from trainyard.store.db import Database
from trainyard.store.rows import UserRow

REQUIRE_SLURM = os.environ.get("TRAINYARD_REQUIRE_SLURM") == "1"
REPO_ROOT = Path(__file__).resolve().parents[3]


def _cluster_problem() -> str | None:
    if not os.environ.get("SLURM_CONF"):
        return "SLURM_CONF is not set (run: export \"$(scripts/dev-slurm.sh start)\")"
    try:
        commands = SlurmCommands()
        done = commands.run(["scontrol", "ping"], check=False)
    except SlurmError as exc:
        return str(exc)
    if "is UP" not in done.stdout:
        return f"slurmctld does not answer: {done.stdout.strip()} {done.stderr.strip()}"
    return None


@pytest.fixture(scope="session")
def slurm() -> SlurmCommands:
    problem = _cluster_problem()
    if problem is not None:
        if REQUIRE_SLURM:
            pytest.fail(f"TRAINYARD_REQUIRE_SLURM=1 but no Slurm cluster is usable: {problem}")
        pytest.skip(f"no Slurm cluster: {problem}")
    return SlurmCommands()


@pytest.fixture(scope="session", autouse=True)
def no_stray_slurm_output() -> Iterator[None]:
    """Slurm writes ``slurm-<id>.out`` into the directory ``sbatch`` ran in when a job names
    no ``--output``; two such files once got committed at the repository root. Every job
    here must name its own output: none may appear in the checkout or the tests' cwd."""
    places = {Path.cwd(), REPO_ROOT}

    def found() -> set[Path]:
        return {path for place in places for path in place.glob("slurm-*.out")}

    before = found()
    yield
    stray = found() - before
    assert not stray, f"a Slurm job without --output wrote {sorted(map(str, stray))}"


@pytest.fixture
def drain(slurm: SlurmCommands) -> Iterator:
    """``drain("n1", ...)`` drains nodes for the test; they are resumed afterwards."""
    drained: list[str] = []

    def drain_nodes(*nodes: str) -> None:
        for node in nodes:
            slurm.run(["scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=trainyard-test"])
            drained.append(node)

    yield drain_nodes
    for node in drained:
        slurm.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], check=False)


@dataclass
class World:
    db: Database
    backend: SlurmBackend
    controller: Controller
    user: UserRow
    slurm: SlurmCommands
    tmp: Path


@pytest.fixture
def world(slurm: SlurmCommands, tmp_path: Path, _sqlite_template: Path) -> Iterator[World]:
    """A store, the Slurm backend and a controller driven cycle by cycle (no thread)."""
    yield from make_world(slurm, tmp_path, _sqlite_template)


def per_user() -> dict[str, Any]:
    """``make_world``'s per-user accounts and sandbox, as ``yard up`` as root has them
    (skipped where the tests do not run as root)."""
    if os.geteuid() != 0:
        pytest.skip("per-user accounts need root")
    sandbox, why = find_sandbox("bwrap", as_root=True)
    assert sandbox is not None, why
    return {"accounts": TaskAccounts(), "sandbox": sandbox}


@pytest.fixture
def accounts_world(slurm: SlurmCommands, tmp_path: Path, _sqlite_template: Path) -> Iterator[World]:
    """``world`` with per-user accounts and the sandbox, as ``yard up`` runs as root."""
    yield from make_world(slurm, tmp_path, _sqlite_template, **per_user())


@pytest.fixture
def podman_accounts_world(slurm: SlurmCommands, tmp_path: Path, _sqlite_template: Path) -> Iterator[World]:
    """``accounts_world`` whose tasks with an image run in Podman, as ``yard up`` as root has them."""
    yield from make_world(slurm, tmp_path, _sqlite_template, containers=ContainerEngine.find("podman", "runc"),
                          **per_user())


# What the attack tests build (``suid_image``): a user's image with a setuid-root shell.
SUID_IMAGE = "localhost/ty-attack-suid:1"


@pytest.fixture
def suid_image(image: str, tmp_path: Path) -> Iterator[str]:
    """What any user can publish: the test image plus a setuid-root copy of bash."""
    (tmp_path / "Containerfile").write_text(
        f"FROM {image}\nRUN cp /bin/bash /usr/local/bin/rootsh && chmod 4755 /usr/local/bin/rootsh\n")
    subprocess.run(["podman", "build", "-q", "-t", SUID_IMAGE, "-f", str(tmp_path / "Containerfile"), str(tmp_path)],
                   check=True, capture_output=True, timeout=120)
    yield SUID_IMAGE
    subprocess.run(["podman", "rmi", "--force", SUID_IMAGE], capture_output=True, check=False)


@pytest.fixture
def outside_tmp() -> Iterator[Path]:
    """A folder (root's, 0755) that sandboxed tasks see: not under /tmp, the sandbox's own."""
    folder = Path(tempfile.mkdtemp(prefix="slurm-test-", dir="/var/lib"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def make_world(slurm: SlurmCommands, tmp_path: Path, template: Path, **backend_options: Any) -> Iterator[World]:
    """``world``'s body, for fixtures that give the backend more options (containers).
    ``template``: the run's migrated SQLite file (tests/conftest.py's ``_sqlite_template``),
    copied: a copy costs a millisecond, migrating a new file 0.1-0.2 s of CPU. Nothing is left
    to migrate in the copy, and not asking saves Alembic's 0.07-0.1 s of loading its scripts."""
    shutil.copyfile(template, tmp_path / "db.sqlite")
    db = Database(f"sqlite:///{tmp_path / 'db.sqlite'}")
    backend = SlurmBackend(tmp_path / "slurm", **backend_options)
    clock = SystemClock()
    controller = Controller(db, backend, clock, workdirs=WorkdirStore(tmp_path / "workdirs"))
    with db.session() as s:
        user = auth.create_user(s, "alice", is_admin=False, clock=clock)
    controller.run_once()  # inventory
    try:
        yield World(db, backend, controller, user, slurm, tmp_path)
    finally:
        cancel_all(slurm, backend.name_prefix)
        db.dispose()
        # The MPS daemons' folder the backend made on this machine (a node-local /run path; issue 36).
        shutil.rmtree(backend.mps_root, ignore_errors=True)


@pytest.fixture
def slurm_server(slurm, tmp_path_factory) -> Iterator[Server]:
    """A real ``yard up --backend slurm`` on the dev cluster."""
    with slurm_yard_up(slurm, tmp_path_factory.mktemp("home")) as srv:
        yield srv
