"""Every task's log in one stream (`yard logs ID --all`, ``GET /jobs/{id}/logs?all=true``):
each line prefixed with its task, whole lines only, whole and followed, with one task's access
rules; in process."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest
from api.harness import Api
from portal.test_portal_jobs import job_file, place, place_done, submit, write_log

from trainyard.backends.base import TaskKey
from trainyard.cli.exits import EXIT_USAGE
from trainyard.services import all_logs
from trainyard.services.auth import create_token, create_user
from trainyard.services.logs import TaskLogs
from trainyard.store.rows import UserRow

Yard = Callable[..., tuple[int, str, str]]  # the `yard` fixture (conftest.py)


def two_workers(api: Api) -> int:
    job_id = submit(api.user, job_file("pair", roles={"ps": 1, "worker": 2}))
    keys = place(api, job_id)
    write_log(api, keys[0], b"ps up\n")
    write_log(api, keys[1], b"w0 a\nw0 b\n")
    write_log(api, keys[2], b"w1 a\nw1 half")  # a last line still being written
    return job_id


def test_the_whole_stream_is_every_task_s_lines_prefixed_task_after_task(api: Api) -> None:
    job_id = two_workers(api)
    answer = api.user.get(f"/api/v1/jobs/{job_id}/logs", params={"all": "true"})
    assert answer.status_code == 200 and answer.headers["x-log-attempt"] == "0"
    assert answer.text == ("[ps/0] ps up\n[worker/0] w0 a\n[worker/0] w0 b\n"
                           "[worker/1] w1 a\n[worker/1] w1 half\n")  # each line whole, ended by a newline
    tail = api.user.get(f"/api/v1/jobs/{job_id}/logs", params={"all": "true", "tail": 1})
    assert tail.text == "[ps/0] ps up\n[worker/0] w0 b\n[worker/1] w1 half\n"  # the last line of each task


def test_following_every_task_ends_once_every_task_has_ended_and_is_read(api: Api) -> None:
    job_id = two_workers(api)
    place_done(api, job_id)
    followed = api.user.get(f"/api/v1/jobs/{job_id}/logs", params={"all": "true", "follow": "true"})
    assert followed.status_code == 200
    lines = followed.text.splitlines()
    assert sorted(lines) == sorted(["[ps/0] ps up", "[worker/0] w0 a", "[worker/0] w0 b", "[worker/1] w1 a",
                                    "[worker/1] w1 half"])


def test_every_task_s_log_has_one_task_s_access_rules_and_no_task_or_offset(api: Api) -> None:
    job_id = two_workers(api)
    with api.ctx.db.session() as session:
        bob = create_user(session, "bob", is_admin=False, clock=api.ctx.clock)
        bob_token = create_token(session, bob, by=bob, clock=api.ctx.clock)
    assert api.client(bob_token).get(f"/api/v1/jobs/{job_id}/logs", params={"all": "true"}).status_code == 404
    assert api.admin.get(f"/api/v1/jobs/{job_id}/logs", params={"all": "true"}).text.startswith("[ps/0] ps up\n")
    for extra in ({"task": "worker/1"}, {"offset": 3}):
        answer = api.user.get(f"/api/v1/jobs/{job_id}/logs", params={"all": "true", **extra})
        assert answer.status_code == 422 and next(iter(extra)) in answer.text


def test_yard_logs_all_prints_every_task_prefixed(api: Api, yard: Yard) -> None:
    job_id = two_workers(api)
    code, out, err = yard("logs", str(job_id), "--all", "--tail", "1")
    assert (code, out, err) == (0, "[ps/0] ps up\n[worker/0] w0 b\n[worker/1] w1 half\n", "")
    place_done(api, job_id)
    code, out, _ = yard("logs", str(job_id), "--all", "-f")
    assert code == 0 and len(out.splitlines()) == 5 and "[worker/1] w1 half\n" in out
    with pytest.raises(SystemExit) as caught:
        yard("logs", str(job_id), "--all", "--task", "worker/1")
    assert caught.value.code == EXIT_USAGE
    code, _, err = yard("logs", str(job_id), "--all", "--limit-bytes", "5")
    assert code == EXIT_USAGE and "--tail N" in err


def test_yard_logs_all_of_a_job_not_yet_run_says_so(api: Api, yard: Yard) -> None:
    job_id = submit(api.user, job_file("later", roles={"worker": 2}))
    code, out, err = yard("logs", str(job_id), "--all")
    assert (code, out) == (0, "") and "no task has run yet" in err


def test_a_follower_gets_lines_as_any_task_writes_them_and_ends_with_the_last_task(api: Api) -> None:
    """The followed stream itself: a running task's unfinished line waits, each new whole line
    comes prefixed, and the stream ends once every task has ended and its log is read."""
    job_id = two_workers(api)
    logs = TaskLogs(api.ctx.db, api.ctx.specs, api.ctx.backend)
    with api.ctx.db.session() as session:
        alice = session.query(UserRow).filter(UserRow.name == "alice").one()
        session.expunge(alice)
    keys = [TaskKey(job_id, 0, "ps", 0), TaskKey(job_id, 0, "worker", 0), TaskKey(job_id, 0, "worker", 1)]

    async def follow() -> None:
        stream = all_logs.follow_all(logs, alice, job_id, None, tail=1)
        assert await anext(stream) == b"[ps/0] ps up\n[worker/0] w0 b\n"  # "w1 half" waits for its newline
        write_log(api, keys[2], b"w1 a\nw1 half done\n")
        assert await anext(stream) == b"[worker/1] w1 half done\n"
        write_log(api, keys[0], b"ps up\nps last")
        place_done(api, job_id)
        assert await anext(stream) == b"[ps/0] ps last\n"  # the task ended: its last line, completed
        assert [chunk async for chunk in stream] == []

    anyio.run(follow)


def test_an_elastic_worker_that_has_not_run_is_said_so_and_the_hint_names_the_workers_that_ran(
        api: Api, yard: Yard) -> None:
    """A new user's trial: the hint named workers up to the maximum, and asking for one that had
    not run said "this attempt has not run yet" of the attempt that ran."""
    from datetime import timedelta

    from trainyard.core.states import AttemptState, JobState, TaskState
    from trainyard.store.rows import AttemptRow, JobRow, TaskRow

    job_id = submit(api.user, {"name": "el", "taskRoles": {"worker": {
        "instances": {"min": 1, "max": 3}, "resourcePerInstance": {"gpu": 1}, "commands": ["train"]}}})
    with api.ctx.db.session() as session:  # running at two workers: 0 and 2 (1 left earlier)
        job = session.get(JobRow, job_id)
        assert job is not None
        now = api.ctx.clock.now()
        attempt = AttemptRow(job_id=job_id, number=0, state=AttemptState.RUNNING, started_at=now - timedelta(minutes=1))
        session.add(attempt)
        session.flush()
        for index in (0, 2):
            session.add(TaskRow(attempt_id=attempt.id, job_id=job_id, role="worker", index=index,
                                state=TaskState.RUNNING, node="local", gpus=[[index, 1000]], cpu_milli=1000,
                                memory_mb=1024, ports={}, started_at=attempt.started_at))
        job.state, job.started_at = JobState.RUNNING, attempt.started_at
    write_log(api, TaskKey(job_id, 0, "worker", 0), b"w0\n")
    code, out, err = yard("logs", str(job_id))
    assert (code, out) == (0, "w0\n") and "the others: --task worker/2 (every task: --all)" in err, err
    code, out, err = yard("logs", str(job_id), "--task", "worker/1")
    assert code == 0 and out == "", (out, err)
    assert f"task worker/1 has not run in attempt 0 of job {job_id}; its tasks: --task worker/0, worker/2" in err
