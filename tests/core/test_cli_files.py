"""``yard submit`` on a path that is no job file says why, before asking any server."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainyard.cli.main import main


@pytest.mark.parametrize(("name", "why"), [("missing.yaml", "No such file or directory"),
                                           (".", "it is a folder, not a job file")])
def test_submit_says_why_it_cannot_read_the_job_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str], name: str, why: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["submit", name]) == 2
    assert capsys.readouterr().err == f"yard: cannot read job file {name!r}: {why}\n"
