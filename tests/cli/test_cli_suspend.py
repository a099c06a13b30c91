"""`yard suspend` / `yard resume` against the real app in process (no controller runs, so
jobs stay waiting: holding and releasing a waiting job, and who may do it)."""

from __future__ import annotations

from collections.abc import Callable

from api.harness import Api

from trainyard.cli.exits import EXIT_AUTH, EXIT_ERROR
from trainyard.services.auth import create_token, create_user, get_user
from trainyard.services.passwords import set_password

Yard = Callable[..., tuple[int, str, str]]  # the `yard` fixture (conftest.py)
JOB = "name: j\ntaskRoles:\n  m:\n    commands: ['sleep 600']\n"


def submit(api: Api) -> int:
    response = api.user.post("/api/v1/jobs", content=JOB, headers={"content-type": "application/yaml"})
    return int(response.json()["id"])


def test_a_waiting_job_is_held_and_released(api: Api, yard: Yard) -> None:
    job = submit(api)
    code, out, _ = yard("suspend", str(job))
    assert (code, out) == (0, f"job {job}: SUSPENDED, held until `yard resume {job}`\n")
    code, out, _ = yard("job", str(job))
    assert code == 0 and "SUSPENDED" in out and "suspended by alice: held until resumed (yard resume)" in out
    detail = api.user.get(f"/api/v1/jobs/{job}").json()
    assert detail["heldBy"] == "alice" and detail["pending"] is None
    assert [e["kind"] for e in detail["events"]] == ["submitted", "suspended"]

    code, out, _ = yard("resume", str(job))
    assert (code, out) == (0, f"job {job}: WAITING; released by alice\n")
    code, _, err = yard("resume", str(job))
    assert code == EXIT_ERROR and f"job {job} is not suspended (WAITING)" in err


def test_an_admins_hold_is_the_admins_to_release_and_strangers_see_nothing(api: Api, yard: Yard) -> None:
    job = submit(api)
    code, _, _ = yard("suspend", str(job), token=api.admin_token)
    assert code == 0
    code, _, err = yard("resume", str(job))
    assert code == EXIT_AUTH and "suspended by admin, an admin: only an admin may resume it" in err
    response = api.user.post(f"/api/v1/jobs/{job}/resume")
    assert response.status_code == 403
    with api.ctx.db.session() as session:
        bob = create_user(session, "bob", is_admin=False, clock=api.ctx.clock)
        bob_token = create_token(session, bob, by=bob, clock=api.ctx.clock)
    response = api.client(bob_token).post(f"/api/v1/jobs/{job}/suspend")
    assert response.status_code == 404
    code, out, _ = yard("resume", str(job), "--json", token=api.admin_token)
    assert code == 0 and '"state": "WAITING"' in out
    response = api.user.post("/api/v1/jobs/999999/suspend")
    assert response.status_code == 404


def test_a_job_waiting_to_resume_shows_the_attempt_that_ran_and_its_log(api: Api, yard: Yard) -> None:
    """Its next attempt has no tasks until it is placed: `yard job`, `yard logs` and the
    portal's page show the suspended attempt's tasks and log meanwhile, and say so."""
    from portal.harness import PASSWORDS, signed_in

    from trainyard.backends.base import TaskKey
    from trainyard.store.rows import AttemptRow, JobRow, TaskRow

    job = submit(api)
    now = api.ctx.clock.now()
    with api.ctx.db.session() as s:
        row = s.get(JobRow, job)
        attempt = AttemptRow(job_id=job, number=0, state="SUSPENDED", started_at=now, finished_at=now,
                             reason="suspended by alice")
        s.add(attempt)
        s.flush()
        s.add(TaskRow(attempt_id=attempt.id, job_id=job, role="m", index=0, state="STOPPED", node="n1", gpus=[],
                      cpu_milli=1000, memory_mb=1024, ports={}, exit_code=85, started_at=now, finished_at=now,
                      message="saved its state"))
        row.state, row.attempt, row.held_by = "SUSPENDED", 1, "alice"
    log = api.ctx.backend.log_path(TaskKey(job, 0, "m", 0))
    log.parent.mkdir(parents=True)
    log.write_text("step 356 saved\n")

    code, out, _ = yard("job", str(job))
    assert code == 0
    assert out.index("Attempt 1: not started yet") < out.index("Attempt 0: SUSPENDED - suspended by alice")
    assert "saved its state" in out
    code, out, _ = yard("logs", str(job))
    assert (code, out) == (0, "step 356 saved\n")

    with api.ctx.db.session() as s:
        set_password(s, get_user(s, "admin"), "alice", PASSWORDS["alice"])
    page = signed_in(api, "alice").get(f"/jobs/{job}").text
    assert "Attempt 0: SUSPENDED" in page and "attempt 1 has not started yet" in page
    assert "saved its state" in page and "Not started yet." not in page
    assert f'href="/jobs/{job}?attempt=0"' in page  # the attempts it has, to choose from
