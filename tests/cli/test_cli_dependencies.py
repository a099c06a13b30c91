"""`yard submit` with dependencies (--after-ok/--after-any/--after-notok, Slurm's --dependency,
added to the file's own) and `yard job` showing them with their states (the real app in
process; no controller runs, so jobs stay waiting)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from api.harness import Api

from trainyard.cli.exits import EXIT_ERROR, EXIT_USAGE

Yard = Callable[..., tuple[int, str, str]]  # the `yard` fixture (conftest.py)


def job_file(tmp_path: Path, extra: str = "") -> str:
    path = tmp_path / "job.yaml"
    path.write_text(f"name: j\ntaskRoles:\n  m:\n    commands: ['true']\n{extra}")
    return str(path)


def submitted(yard: Yard, *args: str) -> int:
    code, out, err = yard("submit", *args, "--json")
    assert (code, err) == (0, ""), err
    return int(json.loads(out)["id"])


def test_flags_and_slurms_text_add_to_the_files_dependencies_and_yard_job_shows_them(api: Api, yard: Yard,
                                                                                      tmp_path: Path) -> None:
    first = submitted(yard, job_file(tmp_path))
    second = submitted(yard, job_file(tmp_path))
    code, out, err = yard("stop", str(second))
    assert code == 0, err
    third = submitted(yard, job_file(tmp_path, f"dependencies: {{afterany: [{first}]}}\n"),
                      "--after-ok", str(first), "--after-notok", f"{second}", "--dependency", f"afterany:{second}")

    code, out, _ = yard("job", str(third), "--json")
    assert code == 0
    shown = json.loads(out)
    assert shown["spec"]["dependencies"] == {"afterok": [first], "afterany": [first, second],
                                             "afternotok": [second]}
    assert [(d["condition"], d["job"], d["state"], d["status"]) for d in shown["dependencies"]] == [
        ("afterok", first, "WAITING", "waiting"), ("afterany", first, "WAITING", "waiting"),
        ("afterany", second, "STOPPED", "met"), ("afternotok", second, "STOPPED", "met")]
    code, out, _ = yard("job", str(third))
    assert (f"  waits for:  afterok {first} (WAITING, waiting), afterany {first} (WAITING, waiting), "
            f"afterany {second} (STOPPED, met), afternotok {second} (STOPPED, met)\n") in out


def test_a_refused_dependency_names_its_field_and_a_bad_flag_is_a_usage_error(api: Api, yard: Yard,
                                                                              tmp_path: Path) -> None:
    first = submitted(yard, job_file(tmp_path))
    code, _, err = yard("submit", job_file(tmp_path), "--after-ok", f"{first},999999")
    assert code == EXIT_ERROR
    assert "dependencies.afterok[1]" in err and "no job 999999" in err
    code, _, err = yard("submit", job_file(tmp_path), "--after-any", "12x")
    assert code == EXIT_USAGE and "--after-any takes job ids, like 12 or 12,13 (got '12x')" in err
    code, _, err = yard("submit", job_file(tmp_path), "--dependency", "after:1")
    assert code == EXIT_ERROR and "dependencies.after: unknown field; did you mean 'afterok'?" in err
