"""A job sent with its working directory: every task starts in a copy of it (a nested
package and a data file there, ignored files not), on the local backend; another user
cannot name it; an upload no job runs in is swept after a day, one a job runs in stays."""

from __future__ import annotations

import io
from datetime import timedelta
from pathlib import Path

import pytest

from trainyard.client_workdir import pack
from trainyard.core.clock import FakeClock
from trainyard.services import workdirs
from trainyard.services.errors import Invalid, NotFound, TooMany
from trainyard.services.workdirs import WorkdirStore
from trainyard.store.rows import WorkdirRow

JOB = """
name: own-code
workdir: {digest}
taskRoles:
  worker:
    instances: 2
    commands:
      - python3 -c "import pkg.sub.model as m; print(m.ANSWER, open('data/table.csv').read().strip())" > {out}/$RANK
      - test ! -e notes.tmp && test ! -e .git
"""


def project(folder: Path) -> Path:
    for name, text in {"pkg/__init__.py": "", "pkg/sub/__init__.py": "", "pkg/sub/model.py": "ANSWER = 42\n",
                       "data/table.csv": "a,b\n", "notes.tmp": "scratch\n", ".gitignore": "*.tmp\n",
                       ".git/HEAD": "ref\n"}.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def upload(world, folder: Path, store: WorkdirStore, user=None) -> str:
    with world.db.session() as s:
        got = workdirs.receive(s, s.merge(user or world.user), io.BytesIO(pack(folder, max_bytes=1 << 20).gzipped()),
                               store, world.clock)
    return got.digest


def test_every_task_starts_in_a_copy_of_the_folder_and_others_cannot_name_it(make_world, tmp_path: Path) -> None:
    store = WorkdirStore(tmp_path / "workdirs")
    world = make_world(gpus=2, workdirs=store, users=("alice", "bob"))
    digest = upload(world, project(tmp_path / "proj"), store)
    out = tmp_path / "out"
    out.mkdir(mode=0o777)
    out.chmod(0o777)
    job_id = world.submit(JOB.format(digest=digest, out=out))
    assert world.drive(job_id).state == "SUCCEEDED", world.explain(job_id)
    assert [(out / str(rank)).read_text() for rank in range(2)] == ["42 a,b\n"] * 2
    assert world.job(job_id).workdir == digest
    with pytest.raises(NotFound, match="no working directory"):
        world.submit(JOB.format(digest=digest, out=out), user=world.bob)
    with pytest.raises(Invalid, match="not an upload's digest"):
        world.submit(JOB.format(digest="./proj", out=out))


def test_unused_uploads_are_swept_after_a_day_and_a_jobs_stays(make_world, tmp_path: Path) -> None:
    store = WorkdirStore(tmp_path / "workdirs")
    clock = FakeClock()
    world = make_world(gpus=1, workdirs=store, clock=clock, users=("alice",))
    used = upload(world, project(tmp_path / "a"), store)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x.py").write_text("print(2)\n")
    unused = upload(world, tmp_path / "b", store)
    job_id = world.submit(JOB.format(digest=used, out=tmp_path))
    clock.advance(timedelta(days=2).total_seconds())
    with world.db.session() as s:
        workdirs.sweep(s, store, clock)
        assert {row.digest for row in s.query(WorkdirRow)} == {used}
    assert store.path(used).exists()
    assert store.path(unused).exists()  # its file is young on the wall clock: gone at a later sweep
    with world.db.session() as s:
        store.remove_except(workdirs.workdir_queries.digests_in_use(s), settled_seconds=0)
    assert store.path(used).exists() and not store.path(unused).exists()
    # Its job ended: kept a week for a clone, then forgotten.
    world.stop(job_id)
    world.drive(job_id, advance=1.0)
    clock.advance(timedelta(days=6).total_seconds())
    with world.db.session() as s:
        workdirs.sweep(s, store, clock)
        assert {row.digest for row in s.query(WorkdirRow)} == {used}
    clock.advance(timedelta(days=2).total_seconds())
    with world.db.session() as s:
        workdirs.sweep(s, store, clock)
        assert s.query(WorkdirRow).count() == 0


def test_one_users_uploads_are_bounded_together(make_world, tmp_path: Path) -> None:
    store = WorkdirStore(tmp_path / "workdirs", user_max_bytes=1500)
    world = make_world(gpus=1, workdirs=store, users=("alice",))
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "x.bin").write_bytes(name.encode() * 1000)
    first = upload(world, tmp_path / "a", store)
    assert upload(world, tmp_path / "a", store) == first  # the same again: nothing more held
    with pytest.raises(TooMany, match=r"keeps \d+ B of working directories and this one is \d+ B more, past this "
                                      r"cluster.s 1.5 KiB per user"):
        upload(world, tmp_path / "b", store)
