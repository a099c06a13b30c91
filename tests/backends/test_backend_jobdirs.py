"""Job directories: one per job, shared by its attempts; disk use; removal (``backends.jobdirs``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from trainyard.backends.base import JobDirectories, TaskKey
from trainyard.backends.jobdirs import job_dir_path, job_ids_with_dirs, measure, remove


def test_every_attempt_of_a_job_gets_the_same_directory_and_finds_what_the_last_one_saved(local) -> None:
    save = 'echo result > out.txt && cd "$TRAINYARD_JOB_DIR" && echo "$MARK" >> attempts && cat attempts\n'
    first = TaskKey(job_id=7, attempt=0, role="worker", index=0)
    assert local.wait_ended(local.launch(save, key=first, env={"MARK": "0"})).exit_code == 0
    # The job's env cannot point the job directory elsewhere.
    second = TaskKey(job_id=7, attempt=1, role="worker", index=0)
    local.launch(save, key=second, env={"MARK": "1", "TRAINYARD_JOB_DIR": "/tmp/elsewhere"})
    assert local.wait_ended(second).exit_code == 0
    assert local.log(second).split() == ["0", "1"]
    other_job = local.launch(save, key=TaskKey(job_id=8, attempt=0, role="worker", index=0), env={"MARK": "0"})
    local.wait_ended(other_job)
    assert local.log(other_job).split() == ["0"]  # a directory of its own

    backend = local.backend
    assert isinstance(backend, JobDirectories)
    assert backend.job_dir_ids() == [7, 8]
    usage = backend.job_dir_usage(7)
    assert usage is not None and usage.files == 1 and usage.bytes > 0 and usage.complete
    works = [backend.work_dir(key) for key in (first, second)]
    assert all((work / "out.txt").is_file() for work in works)
    backend.remove_job_dir(7)
    assert backend.job_dir_ids() == [8] and backend.job_dir_usage(7) is None
    # Their working directories go with it (results, an unpacked upload), their logs stay.
    assert not any(os.path.lexists(work) for work in works)
    assert local.log(second).split() == ["0", "1"]
    assert (backend.work_dir(TaskKey(job_id=8, attempt=0, role="worker", index=0)) / "out.txt").is_file()
    backend.remove_job_dir(7)  # nothing left to remove: no error


def test_disk_use_counts_allocated_blocks_and_stops_at_its_cap(tmp_path: Path) -> None:
    assert measure(tmp_path / "missing") is None
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "data").write_bytes(b"x" * 100_000)
    for i in range(5):
        (tmp_path / f"f{i}").write_text("x")
    (tmp_path / "link").symlink_to("/usr")  # counted as an entry, never followed
    usage = measure(tmp_path)
    assert usage is not None and usage.complete and usage.files == 7
    assert usage.bytes >= 100_000 + 5 * 512
    capped = measure(tmp_path, max_entries=3)
    assert capped is not None and not capped.complete and capped.bytes <= usage.bytes


def test_a_tree_rm_cannot_remove_is_an_oserror_so_a_sweep_goes_on(tmp_path: Path, monkeypatch) -> None:
    """A tree deeper than Python recurses goes to coreutils' rm; when rm fails (a non-root
    server, a folder a task locked itself out of), the error was a CalledProcessError, which
    stopped every later sweep (the attack round). It is an OSError, as rmtree's own."""
    import shutil
    import subprocess

    from trainyard.backends import jobdirs

    job_dir = job_dir_path(tmp_path, 5)
    job_dir.mkdir(parents=True)

    def too_deep(path: object) -> None:
        raise RecursionError

    def refused(argv: list[str], **_: object) -> None:
        raise subprocess.CalledProcessError(1, argv, stderr=b"rm: Permission denied")

    monkeypatch.setattr(shutil, "rmtree", too_deep)
    monkeypatch.setattr(jobdirs.subprocess, "run", refused)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    with pytest.raises(OSError, match="Permission denied"):
        remove(job_dir)


def test_removal_takes_folders_a_task_locked_itself_out_of_and_never_follows_links(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("mine")
    job_dir = job_dir_path(tmp_path / "root", 3)
    (job_dir / "locked" / "deeper").mkdir(parents=True)
    (job_dir / "locked" / "deeper" / "file").write_text("x")
    (job_dir / "to-outside").symlink_to(outside)
    os.chmod(job_dir / "locked" / "deeper", 0)
    os.chmod(job_dir / "locked", 0)
    remove(job_dir)
    assert not job_dir.exists() and (outside / "keep").read_text() == "mine"


def test_only_numbered_folders_with_a_real_job_directory_count(tmp_path: Path) -> None:
    for name in ("1", "2", "notes", "4"):
        (tmp_path / name).mkdir()
    (tmp_path / "1" / "jobdir").mkdir()
    (tmp_path / "2" / "0").mkdir()  # an attempt's folder only
    (tmp_path / "4" / "jobdir").symlink_to(tmp_path / "1" / "jobdir")
    (tmp_path / "notes" / "jobdir").mkdir()
    assert job_ids_with_dirs(tmp_path) == [1]
    assert job_ids_with_dirs(tmp_path / "missing") == []
    with pytest.raises(ValueError, match="job id"):
        job_dir_path(tmp_path, -1)


def test_the_docs_show_the_very_script_that_examples_checkpoint_resume_runs() -> None:
    root = Path(__file__).resolve().parents[2]
    job = yaml.safe_load((root / "examples" / "checkpoint-resume.yaml").read_text())
    command = job["taskRoles"]["main"]["commands"][0]
    assert command.startswith("exec python3 -u - <<'PY'\n") and command.endswith("\nPY\n")
    script = command.split("\n", 1)[1].removesuffix("PY\n")
    page = (root / "docs" / "user" / "jobs.md").read_text()
    shown = page.split("## Where work survives", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert shown == script
    assert len(script.splitlines()) == 10
