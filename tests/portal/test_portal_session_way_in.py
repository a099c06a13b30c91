"""A session's way in (``/sessions/ID/``) before its JupyterLab answers: the job waits, or it
runs and JupyterLab has not opened its port yet. A program gets 503 with ``Retry-After``;
a browser gets a page that says so and reloads itself, so that "Open JupyterLab", clicked
as soon as the portal offers it, lands in the Lab. Past its start (``STARTING_SECONDS``) a
refused connection is the proxy's 502; a session that will not open by itself (ending,
ended, or held by its owner) is 409.

In process, on a real store: the rows are what the controller writes when it places the
session; nothing listens on the session's port."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from datetime import timedelta

import pytest
from api.harness import Api

from portal.harness import make_portal_api, signed_in
from trainyard.core.clock import FakeClock
from trainyard.core.sessions import SESSION_PORT, SESSION_ROLE, SessionPolicy
from trainyard.core.states import AttemptState, JobState, TaskState
from trainyard.schemas.sessions import SessionRequest
from trainyard.services import dev_sessions
from trainyard.services.auth import get_user
from trainyard.services.task_access import GRANT_SECONDS, STARTING_SECONDS
from trainyard.store.rows import AttemptRow, JobRow, NodeRow, TaskRow

HTML = {"Accept": "text/html,application/xhtml+xml"}


@pytest.fixture
def api(db, tmp_path) -> Iterator[Api]:
    """The portal's app on a fake clock: the way in keeps a grant a few seconds."""
    yield make_portal_api(db, tmp_path / "local", FakeClock())


def start(api: Api) -> int:
    with api.ctx.db.session() as s:
        return dev_sessions.start_session(s, get_user(s, "alice"), SessionRequest(gpu=0),
                                          policy=SessionPolicy(python=sys.executable), clock=api.ctx.clock).job_id


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port nothing listens on: bound by the test, never listening (a connection to it is
    refused), and held until the test ends, so that no other process can take it meanwhile."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield int(held.getsockname()[1])


def run_on_a_silent_port(api: Api, job_id: int, port: int) -> None:
    """What the controller writes when the session's task starts, its port one nobody listens on."""
    with api.ctx.db.session() as s:
        node = s.query(NodeRow).first()
        assert node is not None
        node.address = "127.0.0.1"
        now = api.ctx.clock.now() - timedelta(seconds=5)
        attempt = AttemptRow(job_id=job_id, number=0, state=AttemptState.RUNNING, started_at=now)
        s.add(attempt)
        s.flush()
        s.add(TaskRow(attempt_id=attempt.id, job_id=job_id, role=SESSION_ROLE, index=0, state=TaskState.RUNNING,
                      node=node.name, gpus=[], cpu_milli=1000, memory_mb=1024,
                      ports={SESSION_PORT: [port]}, started_at=now))
        job = s.get(JobRow, job_id)
        assert job is not None
        job.state, job.started_at = JobState.RUNNING, now


def set_state(api: Api, job_id: int, state: JobState, held_by: str | None = None) -> None:
    with api.ctx.db.session() as s:
        job = s.get(JobRow, job_id)
        assert job is not None
        job.state, job.held_by = state, held_by
    api.ctx.clock.advance(GRANT_SECONDS)  # type: ignore[attr-defined]  # what was let in a moment ago is checked again


def test_a_session_not_answering_yet_is_503_with_a_retry_and_a_page_that_reloads(api: Api, silent_port: int) -> None:
    session = start(api)
    url = f"/sessions/{session}/lab"
    browser = signed_in(api, "alice")

    waiting = api.user.get(url)
    assert waiting.status_code == 503 and waiting.headers["Retry-After"] == "5", waiting.text
    assert f"session {session} is WAITING" in waiting.json()["detail"]

    run_on_a_silent_port(api, session, silent_port)
    starting = api.user.get(url)
    assert starting.status_code == 503 and starting.headers["Retry-After"] == "2", starting.text
    assert "its JupyterLab is starting: it opens in a moment (ConnectError on port" in starting.json()["detail"]

    page = browser.get(url, headers=HTML)
    assert page.status_code == 503 and page.headers["Retry-After"] == "2"
    assert '<meta http-equiv="refresh" content="2">' in page.text
    assert "JupyterLab is starting" in page.text and "reloads itself every 2 s" in page.text

    # Nobody else learns more than "no such session", starting or not.
    assert api.admin.get(url).status_code == 404

    # Long past its start, nothing listening is no longer "starting": the proxy says why.
    api.ctx.clock.advance(STARTING_SECONDS)  # type: ignore[attr-defined]
    silent = api.user.get(url)
    assert silent.status_code == 502 and "Retry-After" not in silent.headers, silent.text
    assert f"session {session} did not answer on port" in silent.json()["detail"]

    set_state(api, session, JobState.SUSPENDED, held_by="alice")
    held = api.user.get(url)
    assert held.status_code == 409 and "Retry-After" not in held.headers
    assert f"held by alice: `yard resume {session}` lets it run again" in held.json()["detail"]

    for state in (JobState.STOPPING, JobState.STOPPED):
        set_state(api, session, state)
        ended = api.user.get(url)
        assert ended.status_code == 409 and "Retry-After" not in ended.headers
        assert f"is {state}, not RUNNING: start a new one" in ended.json()["detail"]
    page = browser.get(url, headers=HTML)
    assert page.status_code == 409 and "http-equiv" not in page.text
