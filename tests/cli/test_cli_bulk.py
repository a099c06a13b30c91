"""`yard stop|suspend|resume` on several jobs: ids and/or filters, one line per job, a
non-zero exit if any was refused, and asking before more than five (the real app in
process; no controller runs, so jobs stay waiting)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable

import pytest
from api.harness import Api

from trainyard.cli.exits import EXIT_ERROR, EXIT_USAGE
from trainyard.services.auth import create_token, create_user

Yard = Callable[..., tuple[int, str, str]]  # the `yard` fixture (conftest.py)
JOB = "name: j\ntaskRoles:\n  m:\n    commands: ['sleep 600']\n"


def submit(api: Api, token: str | None = None, vc: str | None = None) -> int:
    body = JOB + (f"vc: {vc}\n" if vc else "")
    client = api.user if token is None else api.client(token)
    response = client.post("/api/v1/jobs", content=body, headers={"content-type": "application/yaml"})
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def state(api: Api, job: int) -> str:
    return str(api.admin.get(f"/api/v1/jobs/{job}").json()["state"])


def bob(api: Api) -> str:
    with api.ctx.db.session() as session:
        user = create_user(session, "bob", is_admin=False, clock=api.ctx.clock)
        return create_token(session, user, by=user, clock=api.ctx.clock)


def test_several_ids_one_line_each_and_a_refusal_makes_the_exit_non_zero(api: Api, yard: Yard) -> None:
    a, b = submit(api), submit(api)
    code, out, err = yard("suspend", str(a), str(b))
    assert (code, err) == (0, "")
    assert out == (f"job {a}: SUSPENDED, held until `yard resume {a}`\n"
                   f"job {b}: SUSPENDED, held until `yard resume {b}`\n")
    code, out, err = yard("resume", str(a), "999999", str(b))
    assert code == EXIT_ERROR
    assert out == f"job {a}: WAITING; released by alice\njob {b}: WAITING; released by alice\n"
    assert "job 999999: not resumed: no job 999999" in err and "1 of 3 jobs not resumed" in err
    code, out, _ = yard("stop", str(a), str(b), "--reason", "wrong data", "--json")
    assert code == 0
    results = json.loads(out)
    assert [(r["id"], r["ok"], r["job"]["state"]) for r in results] == [(a, True, "STOPPED"), (b, True, "STOPPED")]
    code, _, err = yard("stop")
    assert code == EXIT_USAGE and "give the jobs to stop: ids, or filters (--user, --state, --vc)" in err


def test_filters_select_through_the_jobs_list_and_a_non_admin_only_their_own(api: Api, yard: Yard) -> None:
    bob_token = bob(api)
    mine = [submit(api), submit(api)]
    theirs = submit(api, bob_token)
    code, out, err = yard("suspend", "--state", "WAITING")  # alice's own jobs only, as `yard jobs` shows
    assert code == 0 and out.count("SUSPENDED, held until") == 2 and all(f"job {j}:" in out for j in mine)
    assert state(api, theirs) == "WAITING"
    code, out, err = yard("stop", "--user", "bob")  # a non-admin's filter selects only their own jobs
    assert (code, out) == (0, "") and "no jobs to stop: none matches the filters" in err
    assert state(api, theirs) == "WAITING"
    # resume selects SUSPENDED jobs by default; ids with filters: only those the filters select
    code, out, err = yard("resume", str(mine[0]), str(theirs), "--user", "alice")
    assert code == 0 and out == f"job {mine[0]}: WAITING; released by alice\n"
    assert f"job {theirs}: not resumed: the filters do not select it" in err
    code, out, _ = yard("stop", "--user", "bob", "--state", "waiting,SUSPENDED", token=api.admin_token)
    assert (code, out) == (0, f"job {theirs}: STOPPED\n")
    code, _, err = yard("stop", "--state", "PENDING")
    assert code == EXIT_ERROR and "unknown state 'PENDING'" in err


def test_more_than_five_jobs_ask_first_or_need_yes(api: Api, yard: Yard, monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = [submit(api) for _ in range(6)]
    monkeypatch.setattr(sys.stdin, "isatty", lambda: False)
    code, out, err = yard("stop", "--state", "WAITING")
    assert (code, out) == (EXIT_USAGE, "")
    assert f"that is 6 jobs ({', '.join(map(str, jobs))}): add --yes to stop them without a terminal" in err
    assert {state(api, j) for j in jobs} == {"WAITING"}

    monkeypatch.setattr(sys.stdin, "isatty", lambda: True)
    asked: list[str] = []
    monkeypatch.setattr("builtins.input", lambda prompt: asked.append(prompt) or "n")
    code, out, err = yard("suspend", *map(str, jobs))
    assert (code, out) == (EXIT_ERROR, "") and asked == [f"suspend 6 jobs ({', '.join(map(str, jobs))})? [y/N] "]
    assert "nothing done" in err and {state(api, j) for j in jobs} == {"WAITING"}
    monkeypatch.setattr("builtins.input", lambda prompt: "y")
    code, out, _ = yard("suspend", *map(str, jobs))
    assert code == 0 and out.count("SUSPENDED") == 6

    monkeypatch.setattr(sys.stdin, "isatty", lambda: False)
    code, out, _ = yard("stop", "--state", "SUSPENDED", "--yes")
    assert code == 0 and out.count("STOPPED") == 6 and {state(api, j) for j in jobs} == {"STOPPED"}
