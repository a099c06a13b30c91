"""`yard jobs` pages on with the filters it was given; `yard clone` runs a job again with its
secrets kept (`--edit` through the user's editor); a job file holding the mask is refused."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from api.harness import Api

from trainyard.cli.exits import EXIT_ERROR, EXIT_USAGE
from trainyard.cli.main import main
from trainyard.store.rows import JobRow

Yard = Callable[..., tuple[int, str, str]]  # the `yard` fixture (conftest.py)
JOB = "name: tr\nsecrets: {key: hunter2}\ntaskRoles:\n  m:\n    commands: ['login <% $secrets.key %>']\n"


def submit(api: Api, token: str, name: str = "tr") -> int:
    response = api.client(token).post(
        "/api/v1/jobs", content=JOB.replace("name: tr", f"name: {name}"), headers={"content-type": "application/yaml"}
    )
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def stored_secrets(api: Api, job_id: int) -> dict[str, str]:
    with api.ctx.db.session() as session:
        row = session.get(JobRow, job_id)
        assert row is not None
        return dict(row.spec["secrets"])


def test_the_more_hint_carries_every_filter_and_pages_through_exactly_the_filtered_jobs(api: Api, yard: Yard) -> None:
    alices = [submit(api, api.user_token, f"a{i}") for i in range(3)]
    submit(api, api.admin_token, "theirs")  # newest, and filtered out by --user
    code, out, _ = yard("jobs", "--user", "alice", "--state", "WAITING", "--limit", "2", token=api.admin_token)
    assert code == 0
    hint = out.splitlines()[-1]
    assert hint == f"(more: yard jobs --state WAITING --user alice --limit 2 --before {alices[1]})"
    argv = shlex.split(hint.removeprefix("(more: ").removesuffix(")"))
    code, out, _ = yard(*argv[1:], token=api.admin_token)
    rows = out.splitlines()[1:]
    assert code == 0 and [int(r.split()[0]) for r in rows] == [alices[0]]  # the last page: no hint


def test_the_more_hint_quotes_what_the_shell_would_split(api: Api, yard: Yard) -> None:
    for i in range(2):
        submit(api, api.user_token, f"a{i}")
    _, out, _ = yard("jobs", "--state", "WAITING, RUNNING", "--limit", "1")
    assert "--state 'WAITING, RUNNING' --limit 1 --before" in out.splitlines()[-1]


def test_name_keeps_jobs_whose_name_holds_the_text_and_stays_in_the_hint(api: Api, yard: Yard) -> None:
    wanted = [submit(api, api.user_token, name) for name in ("Resnet-a", "bert", "resnet-b", "RESNET-c")]
    code, out, _ = yard("jobs", "--name", "resnet", "--limit", "2")
    rows, hint = out.splitlines()[1:-1], out.splitlines()[-1]
    assert code == 0 and [int(r.split()[0]) for r in rows] == [wanted[3], wanted[2]]
    assert hint == f"(more: yard jobs --name resnet --limit 2 --before {wanted[2]})"


def test_yard_clone_submits_a_copy_with_the_secrets_kept(api: Api, yard: Yard) -> None:
    original = submit(api, api.user_token)
    code, out, _ = yard("clone", str(original), "--name", "tr-2", "--priority", "low")
    assert code == 0 and out.startswith("submitted job ") and f"(tr-2), a clone of job {original}" in out
    clone = int(out.split()[2])
    assert stored_secrets(api, clone) == {"key": "hunter2"}
    code, out, _ = yard("job", str(clone), "--json")
    assert json.loads(out)["priority"] == "low"


def editor(tmp_path: Path, program: str) -> str:
    """An editor command: a Python script that rewrites the file it is given (``path``,
    ``text``), and notes the file's name in ``tmp_path/edited``."""
    script = tmp_path / "editor.py"
    script.write_text(
        "import sys, pathlib\npath = pathlib.Path(sys.argv[1])\ntext = path.read_text()\n"
        f"pathlib.Path({str(tmp_path / 'edited')!r}).write_text(str(path))\n{program}\n"
    )
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"


@pytest.fixture
def use_editor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    """Make $EDITOR (with no $VISUAL) an `editor` running ``program``."""

    def use(program: str) -> None:
        monkeypatch.delenv("VISUAL", raising=False)
        monkeypatch.setenv("EDITOR", editor(tmp_path, program))

    return use


def test_yard_clone_edit_submits_the_edited_job_with_masked_secrets_refilled(
    api: Api, yard: Yard, tmp_path: Path, use_editor: Callable[[str], None]
) -> None:
    original = submit(api, api.user_token)
    use_editor("path.write_text(text.replace('name: tr', 'name: edited'))")
    code, out, err = yard("clone", str(original), "--edit")
    assert code == 0, err
    assert "(edited)" in out and stored_secrets(api, int(out.split()[2])) == {"key": "hunter2"}
    assert not Path((tmp_path / "edited").read_text()).exists()  # the edited file is removed once submitted


def test_an_edit_the_server_refuses_is_kept_with_the_command_to_try_again(
    api: Api, yard: Yard, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = submit(api, api.user_token)
    monkeypatch.setenv("EDITOR", "false")  # $VISUAL comes first
    monkeypatch.setenv("VISUAL", editor(tmp_path, "path.write_text(text.replace('instances: 1', 'instances: 0'))"))
    code, _, err = yard("clone", str(original), "--edit")
    assert code == EXIT_ERROR and "taskRoles.m.instances" in err
    kept = Path((tmp_path / "edited").read_text())
    assert f"your edit is kept in {kept}; fix it, then: yard clone {original} --file {kept}" in err
    kept.write_text(kept.read_text().replace("instances: 0", "instances: 1"))
    code, out, err = yard("clone", str(original), "--file", str(kept))
    assert code == 0, err
    assert stored_secrets(api, int(out.split()[2])) == {"key": "hunter2"}
    kept.unlink()


def test_an_emptied_file_or_a_failed_editor_submits_nothing(
    api: Api, yard: Yard, tmp_path: Path, use_editor: Callable[[str], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    original = submit(api, api.user_token)
    use_editor("path.write_text('')")
    assert yard("clone", str(original), "--edit")[::2] == (EXIT_ERROR, "yard: the job file was left empty: "
                                                                       "nothing submitted\n")
    use_editor("sys.exit(3)")
    code, _, err = yard("clone", str(original), "--edit")
    assert code == EXIT_ERROR and "exited with status 3: nothing submitted" in err
    assert not Path((tmp_path / "edited").read_text()).exists()
    monkeypatch.setenv("EDITOR", str(tmp_path / "no-such-editor"))
    code, _, err = yard("clone", str(original), "--edit")
    assert code == EXIT_ERROR and "set $EDITOR, or use --file" in err
    assert len(api.sdk(api.user_token).jobs().items) == 1


def test_submitting_a_shown_job_is_refused_naming_the_secret_and_yard_clone(
    api: Api, yard: Yard, tmp_path: Path
) -> None:
    original = submit(api, api.user_token)
    _, out, _ = yard("job", str(original), "--json")
    (tmp_path / "again.yaml").write_text(yaml.safe_dump(json.loads(out)["spec"]))
    code, _, err = yard("submit", str(tmp_path / "again.yaml"))
    assert code == EXIT_ERROR and err.startswith("yard: secrets.key: ") and "yard clone ID" in err


def test_a_server_address_that_is_not_a_url_is_a_usage_error_not_unreachable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TRAINYARD_URL", "localhost:8642")
    monkeypatch.setenv("TRAINYARD_TOKEN", "ty_x")
    assert main(["jobs"]) == EXIT_USAGE
    assert capsys.readouterr().err == (
        "yard: 'localhost:8642' is not an http(s) address; give the server's, like http://127.0.0.1:8642\n"
    )


def test_clone_takes_either_edit_or_file(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["clone", "1", "--edit", "--file", "x.yaml"])
    assert caught.value.code == EXIT_USAGE and "not allowed with argument" in capsys.readouterr().err


def test_clone_file_reads_json_by_its_suffix_and_says_what_it_cannot_read(
    api: Api, yard: Yard, tmp_path: Path
) -> None:
    original = submit(api, api.user_token)
    _, out, _ = yard("job", str(original), "--json")
    (tmp_path / "again.json").write_text(json.dumps({**json.loads(out)["spec"], "name": "from-json"}))
    code, out, err = yard("clone", str(original), "--file", str(tmp_path / "again.json"))
    assert code == 0 and "(from-json)" in out, err
    assert stored_secrets(api, int(out.split()[2])) == {"key": "hunter2"}
    code, _, err = yard("clone", str(original), "--file", str(tmp_path / "missing.yaml"))
    assert code == EXIT_USAGE and "cannot read job file" in err and "missing.yaml" in err


def test_yard_submit_and_clone_with_an_idempotency_key_make_their_job_once(yard: Yard, api: Api,
                                                                          tmp_path: Path) -> None:
    job_file = tmp_path / "job.yaml"
    job_file.write_text(JOB)
    code, first, _ = yard("submit", str(job_file), "--idempotency-key", "run-1", "--json")
    assert code == 0
    code, again, _ = yard("submit", str(job_file), "--idempotency-key", "run-1", "--json")
    assert code == 0 and json.loads(again)["id"] == json.loads(first)["id"]
    original = json.loads(first)["id"]
    clones = [yard("clone", str(original), "--idempotency-key", "clone-1", "--json") for _ in range(2)]
    assert [c[0] for c in clones] == [0, 0] and json.loads(clones[0][1]) == json.loads(clones[1][1])
    with api.ctx.db.session() as session:
        assert session.query(JobRow).count() == 2
