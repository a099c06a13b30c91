"""``yard doctor`` on the local backend, reading the server's settings and store as ``yard up``
does: a user mapped to an account that does not exist FAILs, with the fix, and the command
exits 1; mapped to one that does, it passes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from trainyard.cli.main import main
from trainyard.core.clock import SystemClock
from trainyard.services import auth
from trainyard.store.db import Database

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="per-user task accounts need root, as yard up")


def doctor(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], home: Path,
           account_map: dict[str, str]) -> tuple[int, dict[str, dict[str, str]]]:
    monkeypatch.setenv("TRAINYARD_HOME", str(home))
    monkeypatch.setenv("TRAINYARD_TASK_ACCOUNT_MAP", json.dumps(account_map))
    monkeypatch.setenv("TRAINYARD_LOCAL_GPUS", "2")
    capsys.readouterr()
    code = main(["doctor", "--backend", "local", "--json"])
    return code, {line["name"]: line for line in json.loads(capsys.readouterr().out)}


def test_an_account_that_does_not_exist_fails_with_its_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    db = Database(f"sqlite:///{tmp_path / 'trainyard.db'}")
    db.migrate()
    with db.session() as session:
        auth.create_user(session, "bob", is_admin=False, clock=SystemClock())
    db.dispose()

    code, lines = doctor(monkeypatch, capsys, tmp_path, {"bob": "ty-doctor-nosuchacct"})
    assert code == 1
    assert lines["store"]["status"] == "OK" and lines["store"]["detail"].startswith("1 user;")
    assert lines["accounts"]["status"] == "FAIL"
    assert "task_account_map['bob']: there is no OS account named 'ty-doctor-nosuchacct'" in lines["accounts"]["detail"]
    assert "create the account (same uid and gid on every machine)" in lines["accounts"]["fix"]
    assert lines["gpus"]["status"] == "OK"  # simulated slots: NVML is not asked

    code, lines = doctor(monkeypatch, capsys, tmp_path, {"bob": "nobody"})
    assert lines["accounts"]["status"] == "OK", lines["accounts"]
    assert code == (1 if any(line["status"] == "FAIL" for line in lines.values()) else 0)
