"""`yard account` and `yard submit --notify` against the real app in process: the address
and default a user sets (an admin: anyone's), a job file's `notify.on` set from the command
line, and a job's notices in `yard job`."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from api.harness import Api

from trainyard.cli.exits import EXIT_AUTH, EXIT_ERROR, EXIT_USAGE
from trainyard.controller.job_notices import JobNotices
from trainyard.core import transitions
from trainyard.core.states import JobState
from trainyard.store.events import record_event
from trainyard.store.rows import JobRow

Yard = Callable[..., tuple[int, str, str]]  # the `yard` fixture (conftest.py)
JOB = "name: j\ntaskRoles:\n  m:\n    commands: ['true']\nnotify: {on: [succeeded], webhook: 'https://hooks.example.invalid/x'}\n"


def test_a_user_sets_their_address_and_default_and_an_admin_anyones(api: Api, yard: Yard) -> None:
    code, out, _ = yard("account")
    assert code == 0 and "e-mail:   (none: yard account email ADDRESS)" in out and "none by default" in out
    code, _, err = yard("account", "notify", "--on", "failed")
    assert code == EXIT_ERROR and "email: alice has no e-mail address" in err
    assert yard("account", "email", "alice@example.org")[0] == 0
    code, out, _ = yard("account", "notify", "--on", "failed,preempted", "--webhook", "https://hooks.example.org/a")
    assert code == 0 and "notices:  failed, preempted by e-mail and webhook https://hooks.example.org/a" in out
    code, _, err = yard("account", "notify", "--on", "failed", "--webhook", "http://169.254.169.254/")
    assert code == EXIT_ERROR and "webhook: 169.254.169.254 is a link-local address" in err
    with pytest.raises(SystemExit) as refused:
        yard("account", "notify", "--on", "finished")
    assert refused.value.code == EXIT_USAGE
    code, out, _ = yard("account", "--json")
    assert json.loads(out)["notify"] == {"on": ["failed", "preempted"], "email": True,
                                         "webhook": "https://hooks.example.org/a"}
    assert yard("account", "notify", "--off")[0] == 0 and "none by default" in yard("account")[1]
    code, _, err = yard("account", "--user", "admin")  # alice is no admin
    assert code == EXIT_AUTH and "only an admin" in err
    code, out, _ = yard("account", "--user", "alice", "email", "a@example.org", token=api.admin_token)
    assert code == 0 and "e-mail:   a@example.org" in out


def test_submit_notify_sets_the_job_files_events_and_yard_job_shows_its_notices(api: Api, yard: Yard,
                                                                                tmp_path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(JOB)
    code, out, _ = yard("submit", str(path), "--notify", "failed,ended")
    assert code == 0, out
    job_id = int(out.split()[2])
    spec = api.user.get(f"/api/v1/jobs/{job_id}").json()["spec"]
    assert spec["notify"] == {"on": ["failed", "ended"], "webhook": "https://hooks.example.invalid/x"}
    with pytest.raises(SystemExit) as refused:
        yard("submit", str(path), "--notify", "done")
    assert refused.value.code == EXIT_USAGE
    with api.ctx.db.session() as session:  # the job is stopped while it waits: an ended event
        job = session.get(JobRow, job_id)
        assert job is not None
        job.stopped_by = "alice"
        record_event(session, job_id, transitions.finish(job, JobState.STOPPED, "stopped by alice",
                                                          None, api.ctx.clock.now()))
    JobNotices(api.ctx.db, api.ctx.clock, None).run()  # no SMTP server; .invalid never resolves
    code, out, _ = yard("job", str(job_id))
    assert code == 0 and "notices:\n  stopped by email: failed (tries 1): this server sends no e-mail" in out
    assert "\n  stopped by webhook: pending (tries 1): OSError: hooks.example.invalid does not resolve" in out
