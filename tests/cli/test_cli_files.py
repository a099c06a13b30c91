"""The CLI without a server: reading job files, and how jobs are shown."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainyard.cli.main import main
from trainyard.schemas.jobs import JobDetail, JobSummary


@pytest.mark.parametrize(("name", "why"), [("missing.yaml", "No such file or directory"),
                                           (".", "it is a folder, not a job file")])
def test_submit_says_why_it_cannot_read_the_job_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str], name: str, why: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["submit", name]) == 2
    assert capsys.readouterr().err == f"yard: cannot read job file {name!r}: {why}\n"


def test_the_jobs_table_shows_run_time_summed_over_attempts_and_a_short_pending_reason() -> None:
    from trainyard.cli.render import job_detail, jobs_table

    job = JobSummary.model_validate(
        {"id": 7, "name": "j", "user": "alice", "vc": "vision", "priority": "normal", "state": "WAITING",
         "gpus": 2, "attempt": 1, "submittedAt": "2026-11-21T10:00:00Z", "startedAt": "2026-11-21T10:00:05Z",
         "finishedAt": None, "exitCode": None, "message": "", "runtimeSeconds": 95,
         "pending": {"reason": "QUOTA", "position": 1, "short": "vision 0/2 free, needs 2",
                     "message": "VC vision: needs 2 V100, 0 of 2 free; first in line: its reservation "
                                "starts when running jobs reach their declared ends"}})
    row = jobs_table([job]).splitlines()[1]
    runtime = 8  # the submit time is two words
    assert row.split()[runtime] == "1:35"  # the run time of attempt 0, not the time since it first started
    assert row.endswith("QUOTA vision 0/2 free, needs 2, #1") and len(row) < 120
    never_ran = job.model_copy(update={"runtimeSeconds": None, "attempt": 0})
    assert jobs_table([never_ran]).splitlines()[1].split()[runtime] == "-"
    detail = job_detail(JobDetail.model_validate({
        **job.model_dump(mode="json"), "retriesUsed": 0, "gracePeriodSeconds": 30, "spec": {}, "attempts": [],
        "events": []}))
    assert "runtime: 1:35" in detail and "first in line: its reservation starts" in detail


def test_a_job_on_borrowed_gpus_is_starred_in_the_list_and_said_so_in_its_detail() -> None:
    from trainyard.cli.render import BORROWED_NOTE, job_detail, jobs_table

    job = JobSummary.model_validate(
        {"id": 7, "name": "j", "user": "alice", "vc": "vision", "priority": "normal", "state": "RUNNING",
         "gpus": 2, "attempt": 0, "submittedAt": "2026-11-21T10:00:00Z", "startedAt": "2026-11-21T10:00:05Z",
         "finishedAt": None, "exitCode": None, "message": "", "pending": None, "borrowed": True})
    lines = jobs_table([job, job.model_copy(update={"id": 8, "borrowed": False})]).splitlines()
    assert [line.split()[3] for line in lines[1:3]] == ["RUNNING*", "RUNNING"]
    assert lines[3] == BORROWED_NOTE
    assert "*" not in jobs_table([job.model_copy(update={"borrowed": False})])
    detail = job_detail(JobDetail.model_validate({
        **job.model_dump(mode="json"), "retriesUsed": 0, "gracePeriodSeconds": 30, "spec": {}, "events": [],
        "attempts": [{"number": 0, "state": "RUNNING", "startedAt": None, "finishedAt": None, "exitCode": None,
                      "reason": "", "tasks": [], "borrowed": True}]}))
    assert ("  borrowed:   runs on borrowed GPUs (over VC vision's quota): reclaimed - suspended if it can be, "
            "else requeued - when the lending VC needs them") in detail.splitlines()
    assert "Attempt 0: RUNNING (on borrowed GPUs)" in detail


def test_yard_job_shows_each_tasks_gpu_devices_and_ports_and_its_events_oldest_first() -> None:
    from trainyard.cli.render import job_detail

    task = {"role": "main", "index": 0, "state": "RUNNING", "node": "n1", "gpus": [0, 3], "gpu": 2, "cpu": 1,
            "memoryMB": 1024, "exitCode": None, "startedAt": None, "finishedAt": None, "message": "", "run": 0,
            "ports": {"http": [8080], "ssh": [2222]}}
    shared = {**task, "index": 1, "gpus": [1], "gpu": 0.5, "ports": {}}
    detail = job_detail(JobDetail.model_validate({
        "id": 7, "name": "j", "user": "alice", "vc": "vision", "priority": "normal", "state": "RUNNING",
        "gpus": 2.5, "attempt": 0, "submittedAt": "2026-11-21T10:00:00Z", "startedAt": "2026-11-21T10:00:05Z",
        "finishedAt": None, "exitCode": None, "message": "", "pending": None, "retriesUsed": 0,
        "gracePeriodSeconds": 30, "spec": {},
        "attempts": [{"number": 0, "state": "RUNNING", "startedAt": None, "finishedAt": None, "exitCode": None,
                      "reason": "", "tasks": [task, shared]}],
        "events": [{"at": "2026-11-21T10:00:00Z", "kind": "SUBMITTED", "message": "first"},
                   {"at": "2026-11-21T10:00:05Z", "kind": "STARTED", "message": "second"}]}))
    lines = detail.splitlines()
    header = next(line for line in lines if "TASK" in line)
    assert "GPU DEVICES" in header and "PORTS" in header and " GPUS " not in header
    row = next(line for line in lines if line.strip().startswith("main/0"))
    assert "0,3" in row and "http:8080 ssh:2222" in row
    assert "1 (0.5)" in next(line for line in lines if line.strip().startswith("main/1"))
    assert detail.index("first") < detail.index("second")


def test_up_refuses_a_bad_setting_before_writing_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("TRAINYARD_HOME", str(tmp_path / "home"))
    assert main(["up", "--local-gpus", "-2"]) == 2
    assert "invalid setting local_gpus (--local-gpus / TRAINYARD_LOCAL_GPUS)" in capsys.readouterr().err
    assert main(["up", "--local-gpus", "2", "--local-gpu-model", "A100; rm -rf /"]) == 2
    assert "invalid setting local_gpu_model (--local-gpu-model / TRAINYARD_LOCAL_GPU_MODEL)" in capsys.readouterr().err
    assert not (tmp_path / "home").exists()
