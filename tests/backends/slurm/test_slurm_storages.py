"""Storages on the Slurm backend: the task, a bare process on a compute node that has the
same paths, finds each storage at $TRAINYARD_STORAGE_<NAME>; a home storage is made on
first use; its log says what a bare process cannot honour (read-only, mountPath). With
per-user accounts the sandbox honours both."""

from __future__ import annotations

import pwd

from e2e.server import wait_until

from slurm.cluster import drive, submit
from trainyard.backends.base import TaskKey
from trainyard.core.clock import SystemClock
from trainyard.services import storages as storage_service


def test_a_slurm_task_sees_its_storages_paths_and_writes_to_a_read_write_one(world) -> None:
    data, refs, homes = world.tmp / "data", world.tmp / "refs", world.tmp / "homes"
    for path in (data, refs, homes):
        path.mkdir()
    (refs / "input.txt").write_text("input\n")
    with world.db.session() as s:
        storage_service.create_storage(s, "data", str(data), read_only=False, kind="local", description="",
                                       clock=SystemClock())
        storage_service.create_storage(s, "refs", str(refs), read_only=True, kind="local", description="",
                                       clock=SystemClock())
        for name in ("data", "refs"):
            storage_service.grant_storage(s, name, "alice", read_only=False)
        storage_service.set_builtin_roots(s, home=str(homes), group=None)
    job_id = submit(world, """
name: storages
storages: [{name: data}, {name: refs, mountPath: /mnt/refs}, {name: home}]
taskRoles:
  main:
    commands:
      - echo "data=$TRAINYARD_STORAGE_DATA refs=$TRAINYARD_STORAGE_REFS"
      - cat "$TRAINYARD_STORAGE_REFS/input.txt"
      - echo "from $SLURMD_NODENAME" > "$TRAINYARD_STORAGE_DATA/out.txt"
      - echo mine > "$TRAINYARD_STORAGE_HOME/f"
""")
    job = drive(world, job_id)
    # The runner records the task's end before Slurm has written the last of its output.
    def whole_log() -> list[str] | None:
        lines = world.backend.read_log(TaskKey(job_id, 0, "main", 0)).data.decode().splitlines()
        return lines if len(lines) >= 4 else None
    log = wait_until(whole_log, what="the task's whole log")
    assert job.state == "SUCCEEDED", log
    assert log[0].startswith("trainyard: storage 'refs' is read-only for this job, but Slurm runs this task as a "
                             "bare process")
    assert "not at its mountPath /mnt/refs" in log[1]
    assert log[2:] == [f"data={data} refs={refs}", "input"]
    assert (data / "out.txt").read_text().startswith("from ")
    assert (homes / "alice" / "f").read_text() == "mine\n"
    assert (homes / "alice").stat().st_mode & 0o777 == 0o700


def test_with_accounts_storages_are_at_their_mountpath_and_a_read_only_one_refuses_writes(accounts_world) -> None:
    """In the sandbox, as the owner's account: each storage at its mountPath; one granted
    read-only, or made read-only by the job, refuses a write (EROFS); a read-write one takes it."""
    world = accounts_world
    data, refs, notes = world.tmp / "data", world.tmp / "refs", world.tmp / "notes"
    for path in (data, refs, notes):
        path.mkdir()
        path.chmod(0o777)  # the account's to write, were it not read-only
    (refs / "input.txt").write_text("input\n")
    with world.db.session() as s:
        for name, path in (("data", data), ("refs", refs), ("notes", notes)):
            storage_service.create_storage(s, name, str(path), read_only=False, kind="local", description="",
                                           clock=SystemClock())
            storage_service.grant_storage(s, name, "alice", read_only=name == "refs")
    job_id = submit(world, """
name: storages
storages: [{name: data, mountPath: /mnt/data}, {name: refs, mountPath: /mnt/refs},
           {name: notes, mountPath: /mnt/notes, readOnly: true}]
taskRoles:
  main:
    commands:
      - echo "$(id -un) data=$TRAINYARD_STORAGE_DATA refs=$TRAINYARD_STORAGE_REFS"
      - cat /mnt/refs/input.txt
      - echo "from $SLURMD_NODENAME" > /mnt/data/out.txt
      - "for d in refs notes; do touch /mnt/$d/mine 2>&1 | sed 's/.*: //'; done"
""")
    job = drive(world, job_id)
    log = world.backend.read_log(TaskKey(job_id, 0, "main", 0)).data.decode().splitlines()
    assert job.state == "SUCCEEDED", log
    assert log == ["ty-alice data=/mnt/data refs=/mnt/refs", "input", "Read-only file system",
                   "Read-only file system"]
    assert (data / "out.txt").read_text().startswith("from ")
    assert (data / "out.txt").stat().st_uid == pwd.getpwnam("ty-alice").pw_uid
    assert not (refs / "mine").exists() and not (notes / "mine").exists()
