"""`yard usage` and the efficiency line of `yard job` against the real app in process:
what they print, and bad periods refused with exit 2 naming the flag."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from api.harness import Api
from services.usage_world import Run, add_job, add_sample, at

from trainyard.cli.exits import EXIT_AUTH, EXIT_USAGE
from trainyard.cli.periods import moment
from trainyard.store.rows import UserRow

Yard = Callable[..., tuple[int, str, str]]  # the `yard` fixture (conftest.py)
JOB = "name: train\ntaskRoles:\n  m:\n    commands: ['sleep 600']\n"
PERIOD = ("--since", "2026-11-01T02:00", "--until", "2026-11-01T06:00")


def write_jobs(api: Api) -> None:
    with api.ctx.db.session() as s:
        users = {u.name: u for u in s.query(UserRow)}
        job = add_job(s, users["alice"], [[Run(at(0), at(10), gpus=[[0, 1000], [1, 1000]], cpu_milli=2000)]],
                      vc="default", name="resnet")
        add_sample(s, job, at(2), step=4 * 3600, gpus_held=2, gpu_util_pct=50.0, cpu_cores=1.0)
        add_job(s, users["admin"], [[Run(at(3), at(4))]], name="sim")


def test_usage_prints_a_table_like_sreport_with_a_total(api: Api, yard: Yard) -> None:
    write_jobs(api)
    code, out, _ = yard("usage", *PERIOD, token=api.admin_token)
    assert code == 0
    title, header, *rows, note = out.splitlines()
    assert title.startswith("usage from ") and title.endswith("(by user)")
    assert header.split() == ["NAME", "JOBS", "GPU-HOURS", "GPU", "EFF", "CPU-HOURS", "CPU", "EFF", "MEM", "GIB-HOURS",
                              "RECENT"]  # fair share's decayed GPU-hours (as of the real clock: not compared here)
    assert note.startswith("RECENT: GPU-hours of every run, decayed with a half-life of 7 days: fair share")
    assert [row.split()[:7] for row in rows] == [
        ["alice", "1", "8.00", "50%", "8.00", "50%", "4.00"],
        ["admin", "1", "1.00", "n/a", "1.00", "n/a", "1.00"],
        ["TOTAL", "2", "9.00", "50%", "9.00", "50%", "5.00"],
    ]


def test_usage_by_job_and_as_json_and_a_user_sees_their_own(api: Api, yard: Yard) -> None:
    write_jobs(api)
    code, out, _ = yard("usage", "--by", "job", *PERIOD)
    rows = [row.split() for row in out.splitlines()[2:-1]]
    assert code == 0 and [row[1:4] for row in rows[:-1]] == [["resnet", "alice", "default"]]  # only hers
    assert rows[-1][:6] == ["TOTAL", "8.00", "50%", "8.00", "50%", "4.00"]
    code, out, _ = yard("usage", "--vc", "default", "--json", *PERIOD)
    report = json.loads(out)
    assert report["by"] == "vc" and [(line["name"], line["gpuHours"]) for line in report["lines"]] == [("default", 8.0)]
    code, _, err = yard("usage", "--user", "admin", *PERIOD)
    assert code == EXIT_AUTH and "only an admin sees another user's usage" in err
    code, out, _ = yard("usage", "--since", "2020-01-01", "--until", "2020-01-02")
    assert code == 0 and out.endswith("nothing ran in this period\n")


def test_a_bad_period_exits_2_naming_the_flag(api: Api, yard: Yard, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        yard("usage", "--since", "last tuesday")
    assert refused.value.code == EXIT_USAGE
    assert "argument --since: 'last tuesday' is neither a time ago" in capsys.readouterr().err
    code, _, err = yard("usage", "--since", "2026-11-02", "--until", "2026-11-01")
    assert code == EXIT_USAGE and "--since (2026-11-02T00:00:00+00:00) must be before --until" in err
    code, _, err = yard("usage", "--since", "1d", "--until", "2d")
    assert code == EXIT_USAGE and "must be before --until" in err


def test_yard_job_shows_an_ended_jobs_efficiency_like_seff(api: Api, yard: Yard) -> None:
    submitted = api.user.post("/api/v1/jobs", content=JOB, headers={"content-type": "application/yaml"})
    job_id = submitted.json()["id"]
    now = datetime.now(UTC)
    with api.ctx.db.session() as s:
        add_job(s, "alice", [[Run(now - timedelta(hours=3), now - timedelta(hours=1))]], job_id=job_id)
        add_sample(s, job_id, now - timedelta(hours=3), step=7200, gpu_util_pct=25.0, cpu_cores=0.5)
    code, out, _ = yard("job", str(job_id))
    assert code == 0
    assert out.splitlines()[-1] == (
        "Efficiency: GPU 25% of 2.00 GPU-hours; CPU 50% of 2.00 core-hours; memory 2.00 GiB-hours held"
    )
    running = api.user.post("/api/v1/jobs", content=JOB, headers={"content-type": "application/yaml"}).json()["id"]
    code, out, _ = yard("job", str(running))
    assert code == 0 and "Efficiency" not in out


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30m", at(24, -1800)),
        ("12h", at(12)),
        ("7d", at(24 - 7 * 24)),
        ("2w", at(24 - 14 * 24)),
        ("2026-11-01", at(0)),
        ("2026-11-01T08:00", at(8)),
        ("2026-11-01T08:00+02:00", at(6)),
    ],
)
def test_moments_are_times_ago_or_dates_in_utc(text: str, expected: datetime) -> None:
    assert moment(text, now=at(24)) == expected
