"""`yard` against a real app in process: what it prints, and the exit code each failure maps to."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from api.harness import Api

from trainyard.backends.local.backend import LocalBackend
from trainyard.cli.exits import EXIT_AUTH, EXIT_ERROR, EXIT_TIMEOUT, EXIT_USAGE
from trainyard.cli.main import main
from trainyard.cli.render import size
from trainyard.core.priorities import PRIORITY_NAMES

Yard = Callable[..., tuple[int, str, str]]  # the `yard` fixture (conftest.py)
JOB = "name: train-a\ntaskRoles:\n  m:\n    resourcePerInstance: {gpu: 2}\n    commands: ['true']\n"


def submitted(api: Api) -> int:
    """A job of alice's, submitted over plain HTTP."""
    response = api.user.post("/api/v1/jobs", content=JOB, headers={"content-type": "application/yaml"})
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def test_yard_jobs_says_so_when_there_are_none(yard: Yard) -> None:
    assert yard("jobs")[:2] == (0, "no jobs\n")


def test_yard_jobs_renders_each_column_of_a_submitted_job(api: Api, yard: Yard) -> None:
    job_id = submitted(api)
    code, out, _ = yard("jobs")
    header, row = out.splitlines()
    assert code == 0
    assert header.split() == ["ID", "NAME", "USER", "STATE", "GPU", "ATTEMPT", "SUBMITTED", "RUNTIME", "INFO"]
    cells = row.split()
    assert cells[:6] == [str(job_id), "train-a", "alice", "WAITING", "2", "0"]
    assert "-" in cells[6:]  # no runtime while it waits


def test_yard_wait_on_a_job_that_cannot_end_exits_with_the_timeout_code(api: Api, yard: Yard) -> None:
    job_id = submitted(api)
    code, _, err = yard("wait", str(job_id), "--timeout", "0")
    assert code == EXIT_TIMEOUT and err == f"yard: job {job_id} is still WAITING after 0 s\n"


def test_an_unknown_job_exits_with_the_error_code_and_the_servers_message(yard: Yard) -> None:
    code, out, err = yard("job", "999")
    assert (code, out) == (EXIT_ERROR, "") and err.startswith("yard: ") and "999" in err


def test_a_bad_token_exits_with_the_auth_code(yard: Yard) -> None:
    code, _, err = yard("whoami", token="not-a-token")
    assert code == EXIT_AUTH and err.startswith("yard: ")


def test_quota_set_offers_exactly_the_known_priorities(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["quota", "set", "bob", "--priority", "high", "--gpus", "1"])
    assert caught.value.code == EXIT_USAGE
    err = capsys.readouterr().err
    assert "invalid choice: 'high'" in err and all(f"'{name}'" in err for name in PRIORITY_NAMES)


def test_a_byte_cap_does_not_go_with_following_and_says_what_to_use(api: Api, yard: Yard) -> None:
    job_id = submitted(api)
    code, out, err = yard("logs", str(job_id), "-f", "--limit-bytes", "5")
    assert (code, out) == (EXIT_USAGE, "")
    assert err == ("yard: --limit-bytes caps a printed log; it does not go with --follow "
                   "(use --tail N to start near the end)\n")


def test_yard_job_shows_the_disk_use_of_the_job_s_directory(api: Api, yard: Yard) -> None:
    job_id = submitted(api)
    code, out, _ = yard("job", str(job_id))
    assert code == 0 and "  job dir:    none yet\n" in out
    backend = api.ctx.backend
    assert isinstance(backend, LocalBackend)
    job_dir = backend.job_dir(job_id)
    job_dir.mkdir(parents=True)
    (job_dir / "ckpt").write_bytes(b"x" * 3 * 1024 * 1024)
    code, out, _ = yard("job", str(job_id))
    assert code == 0 and "  job dir:    3.0 MiB in 1 file\n" in out  # the job still runs: no removal date
    detail = api.sdk(api.user_token).job(job_id).jobDir
    assert detail is not None and detail.files == 1 and detail.complete and detail.removeAfter is None


@pytest.mark.parametrize(("count", "text"), [(0, "0 B"), (1023, "1023 B"), (1536, "1.5 KiB"),
                                             (5 << 30, "5.0 GiB"), (3 << 40, "3.0 TiB")])
def test_sizes_are_shown_in_binary_units(count: int, text: str) -> None:
    assert size(count) == text
