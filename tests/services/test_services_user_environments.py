"""Deleting a user takes their custom environments with them (rows now, folders once the
transaction has committed), shared ones too; others' jobs that run in one are named in the
refusal, and stopped by ``force``. Base environments an admin declared stay, handed to the
admin who deletes. On SQLite, and PostgreSQL when configured."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from trainyard.backends.local.backend import LocalBackend
from trainyard.backends.local.gpus import simulated_gpus
from trainyard.controller.inventory import sync_inventory
from trainyard.core.clock import FakeClock
from trainyard.core.states import EnvironmentState
from trainyard.services import admin, auth, environments, removal
from trainyard.services import jobs as job_service
from trainyard.services.errors import Conflict
from trainyard.spec.loading import parse_job
from trainyard.store.db import Database
from trainyard.store.rows import EnvironmentRow, JobRow, UserRow


def ready(db: Database, clock: FakeClock, owner: str, name: str, root: Path, group: str | None = None) -> str:
    """A custom environment of ``owner``'s whose build has ended (the build job stopped while
    it waited, the environment marked READY as a successful build leaves it); its folder."""
    with db.session() as s:
        user = auth.get_user(s, owner)
        env = environments.create_custom(s, user, environments.CustomEnvironment(name, "tinypkg\n", group=group),
                                         root=root, clock=clock)
        assert env.build_job_id is not None and env.path is not None
        job_service.request_stop(s, user, env.build_job_id, clock=clock)
        env.state = EnvironmentState.READY
        return env.path


def submit_in(db: Database, clock: FakeClock, user: str, environment: str) -> int:
    document = f"name: j\nenvironment: {environment}\ntaskRoles:\n  m: {{commands: ['sleep 600']}}\n"
    with db.session() as s:
        return job_service.submit_job(s, auth.get_user(s, user), parse_job(document), clock=clock).id


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def users(db: Database, clock: FakeClock, tmp_path: Path) -> dict[str, int]:
    """A node; admins root and ops, alice and bob; group cv holds both alice and bob."""
    backend = LocalBackend(tmp_path / "local", gpus=simulated_gpus(1), cpu_milli=8000, memory_mb=16384)
    with db.session() as s:
        sync_inventory(s, backend.name, backend.inventory(), clock)
        ids = {name: auth.create_user(s, name, is_admin=name in ("root", "ops"), clock=clock).id
               for name in ("root", "ops", "alice", "bob")}
        admin.create_group(s, "cv", clock=clock)
        admin.add_member(s, "cv", "alice")
        admin.add_member(s, "cv", "bob")
    return ids


def test_a_deleted_users_environments_go_and_others_jobs_in_them_are_named_then_stopped(db, clock, users, tmp_path):
    own = ready(db, clock, "alice", "mine", tmp_path)
    shared = ready(db, clock, "alice", "shared", tmp_path, group="cv")
    ready(db, clock, "bob", "bobs", tmp_path)
    bobs_job = submit_in(db, clock, "bob", "shared")

    with pytest.raises(Conflict) as refused, db.session() as s:
        removal.delete_user(s, "alice", force=False, by=s.get(UserRow, users["root"]), clock=clock)
    assert (f"cannot delete user alice: others' jobs run in their environments (mine, shared): "
            f"job {bobs_job} (bob, WAITING)") in refused.value.message
    with db.session() as s:  # nothing kept of the refusal
        assert {e.name for e in s.scalars(select(EnvironmentRow))} == {"mine", "shared", "bobs"}

    files: list[Path] = []
    with db.session() as s:
        result = removal.delete_user(s, "alice", force=True, by=s.get(UserRow, users["root"]), clock=clock,
                                     files=files)
    assert result.stoppedJobs == [bobs_job]
    assert sorted(files) == sorted([Path(own), Path(shared)])
    with db.session() as s:
        assert [e.name for e in s.scalars(select(EnvironmentRow))] == ["bobs"]
        assert s.get(JobRow, bobs_job).state == "STOPPED"


def test_a_deleted_admins_base_environments_stay_and_become_the_deleting_admins(db, clock, users):
    with db.session() as s:
        environments.create_base(s, s.get(UserRow, users["ops"]), "conda", path="/opt/conda", image=None,
                                 group=None, clock=clock)
    job = submit_in(db, clock, "bob", "conda")

    files: list[Path] = []
    with db.session() as s:
        result = removal.delete_user(s, "ops", force=False, by=s.get(UserRow, users["root"]), clock=clock,
                                     files=files)
    assert (result.stoppedJobs, files) == ([], [])
    with db.session() as s:
        env = s.scalars(select(EnvironmentRow)).one()
        assert (env.name, env.owner.name, env.path) == ("conda", "root", "/opt/conda")
        assert s.get(JobRow, job).state == "WAITING"  # bob's job goes on in it


def test_torch_from_pypi_alone_is_named_in_the_environments_message_and_an_index_line_silences_it(db, clock,
                                                                                                  users, tmp_path):
    with db.session() as s:
        user = auth.get_user(s, "alice")
        plain = environments.create_custom(s, user, environments.CustomEnvironment("t1", "numpy\ntorch==2.13.0\n"),
                                           root=tmp_path, clock=clock)
        assert "--index-url https://download.pytorch.org/whl/cpu" in plain.message
    for text in ("torchmetrics\n", "--index-url https://download.pytorch.org/whl/cpu\ntorch\n",
                 "-f /shared/wheels\ntorchvision>=0.29\n"):
        assert environments.torch_index_hint(text) == ""
    assert environments.torch_index_hint("TorchVision[extra]>=0.29\n") != ""
