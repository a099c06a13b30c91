"""The CLI without a server: reading job files, and how jobs are shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainyard.cli.main import main
from trainyard.schemas.jobs import JobSummary


@pytest.mark.parametrize(("name", "why"), [("missing.yaml", "No such file or directory"),
                                           (".", "it is a folder, not a job file")])
def test_submit_says_why_it_cannot_read_the_job_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str], name: str, why: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["submit", name]) == 2
    assert capsys.readouterr().err == f"yard: cannot read job file {name!r}: {why}\n"


def test_a_requeued_job_shows_no_runtime_while_it_waits() -> None:
    from trainyard.cli.render import jobs_table

    job = JobSummary.model_validate(
        {"id": 7, "name": "j", "user": "alice", "vc": "default", "priority": "normal", "state": "WAITING",
         "gpus": 1, "attempt": 1, "submittedAt": "2026-11-21T10:00:00Z", "startedAt": "2026-11-21T10:00:05Z",
         "finishedAt": None, "exitCode": None, "pending": None, "message": ""})
    runtime = 8  # the submit time is two words
    assert jobs_table([job]).splitlines()[1].split()[runtime] == "-"
    assert jobs_table([job.model_copy(update={"state": "RUNNING"})]).splitlines()[1].split()[runtime] != "-"


def test_up_refuses_a_bad_setting_before_writing_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TRAINYARD_HOME", str(tmp_path / "home"))
    assert main(["up", "--local-gpus", "-2"]) == 2
    assert "invalid setting local_gpus (--local-gpus / TRAINYARD_LOCAL_GPUS)" in capsys.readouterr().err
    assert not (tmp_path / "home").exists()
