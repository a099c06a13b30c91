"""Storages under the real controller and local backend: a job's task finds its storage
through $TRAINYARD_STORAGE_<NAME> and writes there; a storage that can no longer be mounted
when the job starts fails the launch with the reason."""

from __future__ import annotations

from pathlib import Path

from trainyard.core.clock import SystemClock
from trainyard.services import storages as storage_service


def test_a_task_writes_to_its_granted_storage_through_its_variable(world, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with world.db.session() as s:
        storage_service.create_storage(s, "data", str(data), read_only=False, kind="local", description="",
                                       clock=SystemClock())
        storage_service.grant_storage(s, "data", world.user.name, read_only=False)
    job_id = world.submit("name: w\nstorages: [{name: data, subPath: out}]\ntaskRoles:\n  m:\n"
                          "    commands: ['echo $TRAINYARD_STORAGE_DATA > $TRAINYARD_STORAGE_DATA/where']\n")
    (data / "out").mkdir()
    assert world.drive(job_id).state == "SUCCEEDED"
    assert (data / "out" / "where").read_text() == f"{data}/out\n"


def test_a_storage_gone_before_the_launch_fails_the_job_with_the_reason(world, tmp_path: Path) -> None:
    with world.db.session() as s:
        storage_service.set_builtin_roots(s, home=str(tmp_path), group=None)
    job_id = world.submit("name: h\nstorages: [{name: home}]\ntaskRoles:\n  m:\n    commands: ['true']\n")
    with world.db.session() as s:  # the admin turned home storages off, and restarted the server
        storage_service.set_builtin_roots(s, home=None, group=None)
    job = world.drive(job_id)
    assert job.state == "FAILED"
    message = world.tasks(job_id)[0].message
    assert message == ("storage 'home' (storages[0]) cannot be mounted any more: no storage named 'home'; home "
                       "storages are not enabled on this cluster (setting storage_home_root)")
    assert "storage 'home'" in job.state_message
