"""What `yard` prints has control characters escaped (cli/terminal.py): another user's text
in a job's message or events must not drive the reader's terminal."""

from __future__ import annotations

from collections.abc import Callable

from api.harness import Api
from portal.test_portal_jobs import submit

from trainyard.cli.terminal import shown
from trainyard.store.rows import JobRow

Yard = Callable[..., tuple[int, str, str]]  # the `yard` fixture (conftest.py)
HOSTILE = "pull failed: \x1b]52;c;cm0gLXJmIH4K\x07\x1b[2J\u202eevil\x9b31m"


def test_a_message_anothers_job_holds_reaches_the_admins_terminal_escaped(api: Api, yard: Yard) -> None:
    job_id = submit(api.user, {"name": "img", "taskRoles": {"w": {"commands": ["true"]}}})
    with api.ctx.db.session() as session:
        job = session.get(JobRow, job_id)
        assert job is not None
        job.state_message = HOSTILE  # as a waiting job's reason would hold it
        job.pending_reason, job.pending_message = "NO_FIT", HOSTILE
    for args in (("job", str(job_id)), ("jobs", "--user", "alice")):
        code, out, err = yard(*args, token=api.admin_token)
        assert code == 0, err
        assert "\x1b" not in out and "\u202e" not in out and "\x9b" not in out and "\x07" not in out
        assert "pull failed: \\x1b]52;c;cm0gLXJmIH4K\\x07" in out
    code, out, err = yard("job", str(job_id), "--json", token=api.admin_token)  # JSON escapes them itself
    assert code == 0 and "\x1b" not in out and "\\u001b]52" in out


def test_shown_keeps_lines_tabs_and_progress_and_escapes_the_rest() -> None:
    assert shown("a\tb\r\nc") == "a\tb\r\nc"
    assert shown("\x00\x1b[31m\x7f\u2066x\u2069") == "\\x00\\x1b[31m\\x7f\\u2066x\\u2069"
    assert shown("héllo, 世界") == "héllo, 世界"

