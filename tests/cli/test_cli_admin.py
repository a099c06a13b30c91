"""`yard token`, `yard user`, `yard vc`, `yard group` removals against a real app in process:
what they print, what a refusal says, and where a new token should go."""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from api.harness import Api

from trainyard.cli.admin_commands import TOKEN_FILE_HINT, private_file_hint
from trainyard.cli.exits import EXIT_AUTH, EXIT_ERROR, EXIT_USAGE

Yard = Callable[..., tuple[int, str, str]]  # the `yard` fixture (conftest.py)
JOB = "name: j\ndefaults: {virtualCluster: VC}\ntaskRoles:\n  m:\n    commands: ['sleep 600']\n"


def submit(api: Api, vc: str = "default") -> int:
    response = api.user.post(
        "/api/v1/jobs", content=JOB.replace("VC", vc), headers={"content-type": "application/yaml"}
    )
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


@pytest.mark.postgres
def test_token_list_shows_ids_notes_and_use_never_the_secret_and_revoke_takes_an_id(api: Api, yard: Yard) -> None:
    code, out, err = yard("token", "create", "--name", "ci runner", "--json")
    assert code == 0 and f"yard: {TOKEN_FILE_HINT}\n" == err  # stdout is no file here: the general hint
    code, out, _ = yard("token", "list")
    header, first, second = out.splitlines()
    assert header.split() == ["ID", "USER", "NAME", "PREFIX", "CREATED", "LAST", "USED"]
    assert first.split()[:3] == ["2", "alice", "-"] and second.split()[:4] == ["3", "alice", "ci", "runner"]
    assert api.user_token not in out and api.user_token[:10] + "…" in first
    assert second.endswith(" -")  # never used yet

    code, out, _ = yard("token", "revoke", "3")
    assert code == 0 and out.startswith("revoked token 3 of alice (ty_") and "refused from now on" in out
    code, _, err = yard("token", "revoke", "1")  # the admin's: not hers to see
    assert code == EXIT_ERROR and "no token 1; `yard token list` shows the ids" in err
    code, _, err = yard("token", "list", "--all")
    assert code == EXIT_AUTH and "only an admin" in err
    code, out, _ = yard("token", "list", "--all", token=api.admin_token)
    assert [line.split()[1] for line in out.splitlines()[1:]] == ["admin", "alice"]


def test_a_private_token_file_gets_no_warning_and_a_readable_one_names_its_mode(tmp_path: Path) -> None:
    private, shared = tmp_path / "private.json", tmp_path / "shared.json"
    with open(os.open(private, os.O_CREAT | os.O_WRONLY, 0o600), "w") as stream:
        assert private_file_hint(stream) is None
    with open(os.open(shared, os.O_CREAT | os.O_WRONLY, 0o600), "w") as stream:
        os.chmod(shared, 0o644)
        hint = private_file_hint(stream)
    assert hint is not None and "can be read by others (mode 0644): `chmod 600` it" in hint


def test_user_disable_says_which_jobs_go_on_and_how_to_stop_them(api: Api, yard: Yard) -> None:
    job = submit(api)
    code, out, _ = yard("user", "disable", "alice", token=api.admin_token)
    assert code == 0 and out == (
        f"disabled user alice; job {job} goes on (`yard user disable alice --stop-jobs` "
        "stops it); alice's tokens are refused until `yard user enable alice`\n"
    )
    code, _, err = yard("whoami")
    assert code == EXIT_AUTH and "user alice is disabled" in err
    code, out, _ = yard("user", "list", token=api.admin_token)
    assert ["alice", "no", "disabled"] == next(line.split()[:3] for line in out.splitlines() if "alice" in line)
    assert yard("user", "enable", "alice", token=api.admin_token)[1] == "enabled user alice: their tokens work again\n"
    assert yard("whoami")[:2] == (0, "alice\n")
    code, out, _ = yard("user", "disable", "alice", "--stop-jobs", token=api.admin_token)
    assert f"stopped job {job} (waiting ones at once, running ones after their grace period)" in out


def test_user_delete_is_refused_while_jobs_run_and_force_says_what_it_stopped(api: Api, yard: Yard) -> None:
    job = submit(api)
    code, out, err = yard("user", "delete", "alice", token=api.admin_token)
    assert (code, out) == (EXIT_ERROR, "")
    assert err == (
        f"yard: cannot delete user alice: they have waiting or running jobs: job {job} (alice, WAITING). "
        "Stop it first, or pass force (`yard user delete alice --force`) to stop it\n"
    )
    code, out, _ = yard("user", "delete", "alice", "--force", token=api.admin_token)
    assert code == 0 and out.startswith(f"deleted user alice; stopped job {job} ")
    assert "tokens are revoked" in out and "history keeps their name" in out
    assert yard("whoami")[0] == EXIT_AUTH


def test_vc_delete_vc_revoke_and_group_remove_refuse_then_force(api: Api, yard: Yard) -> None:
    for args in (
        ("vc", "create", "vision", "--gpus", "2"),
        ("group", "create", "cv"),
        ("group", "add", "cv", "alice"),
        ("vc", "grant", "vision", "@cv"),
    ):
        assert yard(*args, token=api.admin_token)[0] == 0
    job = submit(api, "vision")
    for args, command in (
        (("group", "remove", "cv", "alice"), "yard group remove cv alice --force"),
        (("vc", "revoke", "vision", "@cv"), "yard vc revoke vision @cv --force"),
        (("vc", "delete", "vision"), "yard vc delete vision --force"),
    ):
        code, _, err = yard(*args, token=api.admin_token)
        assert code == EXIT_ERROR and f"job {job} (alice, WAITING)" in err and command in err, args
    code, out, _ = yard("vc", "delete", "vision", "--force", token=api.admin_token)
    assert code == 0 and out.startswith(f"deleted virtual cluster vision; stopped job {job} ")
    code, _, err = yard("vc", "delete", "vision", token=api.admin_token)
    assert code == EXIT_ERROR and "no virtual cluster named 'vision'" in err
    assert yard("group", "remove", "cv", "alice", token=api.admin_token)[1] == "alice is no longer in group cv\n"
    code, _, err = yard("vc", "delete", "default", token=api.admin_token)
    assert code == EXIT_ERROR and "'default' is built in" in err
    assert yard("vc", "delete", "default")[0] == EXIT_AUTH  # alice is no admin


def test_user_passwd_reads_stdin_asks_the_current_one_after_the_first_and_admins_reset(
        api: Api, yard: Yard, monkeypatch) -> None:
    def passwd(*args: str, stdin: str, token: str | None = None) -> tuple[int, str, str]:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        return yard("user", "passwd", *args, "--password-stdin", token=token)

    assert passwd(stdin="first password\n") == (
        0, "password of alice set: sign in to the portal with it; their browser sessions ended\n", "")
    code, _, err = passwd(stdin="second password\n")  # she has one now: the current comes first
    assert code == EXIT_USAGE and "give the current one on the line before it" in err
    code, _, err = passwd(stdin="wrong one\nsecond password\n")
    assert code == EXIT_AUTH and "the current password is wrong" in err
    assert passwd(stdin="first password\nsecond password\n")[0] == 0
    code, _, err = passwd("admin", stdin="takeover password\n")
    assert code == EXIT_AUTH and "only an admin may set another user's password" in err
    assert passwd("alice", stdin="reset by admin\n", token=api.admin_token)[1].startswith("password of alice set")
    code, out, _ = yard("user", "passwd", "alice", "--clear", token=api.admin_token)
    assert code == 0 and out.startswith("removed alice's password")
    assert yard("whoami", "--json")[1].count('"hasPassword": false') == 1


def test_user_passwd_without_a_terminal_or_stdin_says_how(yard: Yard, monkeypatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    code, _, err = yard("user", "passwd")
    assert code == EXIT_USAGE and "give the password with --password-stdin" in err
