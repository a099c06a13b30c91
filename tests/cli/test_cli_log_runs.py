"""A task's earlier runs in an attempt (re-run in place after a failure, restarted by an
elastic resize) each have a log: ``yard logs --run N`` / ``--previous``, the API's ``run`` and
``previous``, the SDK's; the latest run's log says they are there."""

from __future__ import annotations

from collections.abc import Callable

from api.harness import Api
from portal.test_portal_jobs import job_file, place, submit, write_log

from trainyard.backends.base import TaskKey
from trainyard.cli.exits import EXIT_ERROR, EXIT_USAGE
from trainyard.store.rows import TaskRow

Yard = Callable[..., tuple[int, str, str]]  # the `yard` fixture (conftest.py)


def _rerun_twice(api: Api) -> int:
    """A job whose one task ran three times in attempt 0 (runs 0 and 1 failed, re-run in place)."""
    job_id = submit(api.user, job_file("flaky"))
    [key] = place(api, job_id)
    with api.ctx.db.session() as session:
        task = session.query(TaskRow).filter_by(job_id=job_id).one()
        task.run = 2
    for run in range(3):
        write_log(api, TaskKey(key.job_id, key.attempt, key.role, key.index, run), f"run {run}\n".encode())
    return job_id


def test_yard_logs_reads_each_run_of_a_task_and_says_the_earlier_ones_are_there(api: Api, yard: Yard) -> None:
    job_id = _rerun_twice(api)
    code, out, err = yard("logs", str(job_id))
    assert (code, out) == (0, "run 2\n")
    assert "showed run 2 of task" in err and "its earlier runs: --previous, --run 0..1" in err
    assert yard("logs", str(job_id), "--previous")[:2] == (0, "run 1\n")
    assert yard("logs", str(job_id), "--run", "0")[:2] == (0, "run 0\n")
    code, _, err = yard("logs", str(job_id), "--run", "3")
    assert code == EXIT_ERROR and "has run 3 times (runs 0 to 2) in attempt 0" in err
    code, _, err = yard("logs", str(job_id), "--previous", "-f")
    assert code == EXIT_USAGE and "not with --follow" in err
    sdk = api.sdk(api.user_token)
    assert sdk.logs(job_id, run=1) == b"run 1\n" and sdk.read_log(job_id, previous=True).run == 1
    answer = api.user.get(f"/api/v1/jobs/{job_id}/logs", params={"run": 0, "previous": "true"})
    assert answer.status_code == 422 and "not both" in answer.text
