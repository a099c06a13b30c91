"""`yard submit` of a sweep (a `sweep:` section, or `--sweep NAME=V1,V2` flags) and `yard
sweep list|show|stop|clone` (the real app in process; no controller runs, so jobs wait)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from api.harness import Api

from trainyard.cli.exits import EXIT_USAGE

Yard = Callable[..., tuple[int, str, str]]  # the `yard` fixture (conftest.py)
JOB = "name: lr\nparameters: {lr: 1}\ntaskRoles:\n  m:\n    commands: ['echo <% $parameters.lr %>']\n"


def test_flags_make_a_grid_sweep_followed_shown_stopped_and_cloned(api: Api, yard: Yard, tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(JOB)
    code, out, err = yard("submit", str(job), "--sweep", "lr=0.1,0.01", "--sweep", "opt=adam,sgd", "--parallel", "2")
    assert (code, err) == (0, ""), err
    assert out.startswith("submitted sweep ") and "4 jobs" in out and "at most 2 at once" in out
    sweep_id = out.split()[2]
    code, out, _ = yard("sweep", "show", sweep_id, "--json")
    shown = json.loads(out)
    assert [m["params"] for m in shown["members"]] == [
        {"lr": 0.1, "opt": "adam"}, {"lr": 0.1, "opt": "sgd"}, {"lr": 0.01, "opt": "adam"}, {"lr": 0.01, "opt": "sgd"}]
    code, out, _ = yard("sweep", "show", sweep_id)
    assert "lr=0.01 opt=sgd" in out and "WAITING" in out and "parallel: 2" in out
    code, out, _ = yard("sweep", "list")
    assert code == 0 and out.splitlines()[1].split()[:4] == [sweep_id, "lr", "alice", "4"]
    assert yard("sweep", "stop", sweep_id)[1] == f"sweep {sweep_id}: 4 jobs told to stop\n"
    code, out, _ = yard("sweep", "show", sweep_id, "--watch", "--interval", "0.01")
    assert code != 0 and "4 STOPPED" in out  # ended, not all succeeded
    code, out, _ = yard("sweep", "clone", sweep_id)
    assert code == 0 and f"a clone of sweep {sweep_id}: 4 jobs" in out


def test_a_sweep_section_is_seen_and_bad_flags_are_usage_errors(api: Api, yard: Yard, tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(JOB + "sweep:\n  list: [{lr: 3}, {lr: 4}]\n")
    code, out, err = yard("submit", str(job))
    assert code == 0 and "2 jobs" in out, err
    assert yard("submit", str(job), "--sweep", "lr")[0] == EXIT_USAGE
    assert yard("submit", str(job), "--sweep", "x=1")[0] == EXIT_USAGE  # a list and a grid at once
    assert yard("submit", str(job), "--dry-run")[0] == EXIT_USAGE
    plain = tmp_path / "plain.yaml"
    plain.write_text(JOB)
    code, out, err = yard("submit", str(plain), "--parallel", "2")
    assert code == EXIT_USAGE and "--sweep" in err
    code, out, _ = yard("submit", str(plain))  # no sweep: one job, as before
    assert code == 0 and out.startswith("submitted job ")
