"""A job's files for its owner (``GET /jobs/{id}/files``, ``…/files/download``, ``yard ls``,
``yard cp``, the SDK): the job's directory and a task's working directory, listed and
downloaded (ranges), with a log's access rules; hostile paths refused with a 4xx; in process."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from api.harness import Api
from portal.test_portal_jobs import job_file, place, submit

from trainyard.cli.exits import EXIT_ERROR, EXIT_USAGE
from trainyard.services.auth import create_token, create_user

Yard = Callable[..., tuple[int, str, str]]  # the `yard` fixture (conftest.py)


def job_with_files(api: Api) -> tuple[int, Path, Path]:
    """A job whose directory holds results and whose worker/1 wrote a checkpoint."""
    job_id = submit(api.user, job_file("train", roles={"worker": 2}))
    keys = place(api, job_id)
    job_dir = api.ctx.backend.job_dir(job_id)  # type: ignore[attr-defined]
    (job_dir / "out").mkdir(parents=True)
    (job_dir / "out" / "result.json").write_bytes(b'{"acc": 0.93}\n')
    work = api.ctx.backend.work_dir(keys[1])  # type: ignore[attr-defined]
    work.mkdir(parents=True, exist_ok=True)
    (work / "ckpt.bin").write_bytes(bytes(range(256)) * 4)
    return job_id, job_dir, work


def test_the_owner_lists_and_downloads_the_job_s_directory_and_a_task_s(api: Api) -> None:
    job_id, job_dir, _ = job_with_files(api)
    top = api.user.get(f"/api/v1/jobs/{job_id}/files").json()
    assert top["task"] is None and [(e["name"], e["type"]) for e in top["entries"]] == [("out", "dir")]
    out = api.user.get(f"/api/v1/jobs/{job_id}/files", params={"path": "out"}).json()
    assert [(e["name"], e["type"], e["size"]) for e in out["entries"]] == [("result.json", "file", 14)]
    got = api.user.get(f"/api/v1/jobs/{job_id}/files/download", params={"path": "out/result.json"})
    assert got.status_code == 200 and got.content == b'{"acc": 0.93}\n'
    assert got.headers["content-type"] == "application/octet-stream"
    assert got.headers["accept-ranges"] == "bytes" and got.headers["x-content-type-options"] == "nosniff"
    assert got.headers["content-disposition"].startswith('attachment; filename="result.json"')
    task = api.user.get(f"/api/v1/jobs/{job_id}/files", params={"task": "worker/1"}).json()
    assert task["task"] == "worker/1" and task["attempt"] == 0 and task["entries"][0]["name"] == "ckpt.bin"
    ckpt = api.user.get(f"/api/v1/jobs/{job_id}/files/download", params={"task": "worker/1", "path": "ckpt.bin"})
    assert ckpt.content == bytes(range(256)) * 4


def test_ranges_answer_206_with_content_range_and_416_past_the_end(api: Api) -> None:
    job_id, _, _ = job_with_files(api)
    url, params = f"/api/v1/jobs/{job_id}/files/download", {"task": "worker/1", "path": "ckpt.bin"}
    whole = bytes(range(256)) * 4
    for asked, start, end in (("bytes=10-19", 10, 20), ("bytes=1000-", 1000, 1024), ("bytes=-4", 1020, 1024),
                              ("bytes=1020-5000", 1020, 1024)):
        got = api.user.get(url, params=params, headers={"Range": asked})
        assert got.status_code == 206, asked
        assert got.headers["content-range"] == f"bytes {start}-{end - 1}/1024" and got.content == whole[start:end]
    past = api.user.get(url, params=params, headers={"Range": "bytes=1024-"})
    assert past.status_code == 416 and past.headers["content-range"] == "bytes */1024"
    for ignored in ("bytes=0-1,5-6", "lines=1-2", "bytes=9-3", "bytes=x-", "bytes=1-" + "9" * 5000):
        got = api.user.get(url, params=params, headers={"Range": ignored})
        assert got.status_code == 200 and got.content == whole, ignored


def test_another_user_s_job_is_no_such_job_and_an_admin_may_read_it(api: Api) -> None:
    job_id, _, _ = job_with_files(api)
    with api.ctx.db.session() as session:
        bob = create_user(session, "bob", is_admin=False, clock=api.ctx.clock)
        bob_token = create_token(session, bob, by=bob, clock=api.ctx.clock)
    bob_client = api.client(bob_token)
    for url, params in ((f"/api/v1/jobs/{job_id}/files", {}), (f"/api/v1/jobs/{job_id}/files", {"task": "worker/0"}),
                        (f"/api/v1/jobs/{job_id}/files/download", {"path": "out/result.json"})):
        answer = bob_client.get(url, params=params)
        assert answer.status_code == 404 and answer.json()["detail"] == f"no job {job_id}", url
    assert api.client(None).get(f"/api/v1/jobs/{job_id}/files").status_code == 401
    assert api.admin.get(f"/api/v1/jobs/{job_id}/files/download",
                         params={"path": "out/result.json"}).content == b'{"acc": 0.93}\n'


HOSTILE = [("../../../../etc/passwd", "'..'"), ("/etc/passwd", "absolute"), ("out/\0", "NUL"),
           ("escape/passwd", "symbolic link"), ("out/link", "symbolic link"), ("pipe", "not a regular file"),
           ("out", "folder"), ("hard", "hard links")]


def test_hostile_paths_are_refused_with_422_naming_the_field(api: Api) -> None:
    job_id, job_dir, _ = job_with_files(api)
    (job_dir / "escape").symlink_to("/etc")
    (job_dir / "out" / "link").symlink_to(job_dir.parent)
    os.mkfifo(job_dir / "pipe")
    os.link(job_dir / "out" / "result.json", job_dir / "hard")
    for path, said in HOSTILE:
        answer = api.user.get(f"/api/v1/jobs/{job_id}/files/download", params={"path": path})
        assert answer.status_code == 422, (path, answer.text)
        assert said in answer.json()["detail"] and answer.json()["errors"][0]["path"] == "path", path
    assert api.user.get(f"/api/v1/jobs/{job_id}/files", params={"path": "escape"}).status_code == 422


def test_what_is_not_there_is_404_and_a_task_or_attempt_that_does_not_fit_is_said(api: Api) -> None:
    job_id = submit(api.user, job_file("early", roles={"worker": 1}))
    assert "does not exist" in api.user.get(f"/api/v1/jobs/{job_id}/files").json()["detail"]
    assert "has not started" in api.user.get(f"/api/v1/jobs/{job_id}/files", params={"task": "worker/0"}).json()[
        "detail"]
    place(api, job_id)
    api.ctx.backend.job_dir(job_id).mkdir(parents=True)  # type: ignore[attr-defined]
    missing = api.user.get(f"/api/v1/jobs/{job_id}/files/download", params={"path": "nope.txt"})
    assert missing.status_code == 404 and "no 'nope.txt'" in missing.json()["detail"]
    assert api.user.get(f"/api/v1/jobs/{job_id}/files", params={"task": "ps/0"}).status_code == 422
    assert api.user.get(f"/api/v1/jobs/{job_id}/files", params={"attempt": 0}).json()["errors"][0]["path"] == "attempt"


def test_yard_ls_and_cp_list_copy_and_print_names_escaped(api: Api, yard: Yard, tmp_path: Path) -> None:
    job_id, job_dir, _ = job_with_files(api)
    (job_dir / "evil\x1b]0;pwned\x07\nname").write_text("x")
    (job_dir / "shadow").symlink_to("/etc/shadow")
    code, out, _ = yard("ls", str(job_id))
    assert code == 0 and "out/" in out and "shadow -> /etc/shadow" in out
    assert "\x1b" not in out and "evil\\x1b]0;pwned\\x07\\nname" in out
    code, out, _ = yard("ls", f"{job_id}:out", "--json")
    assert code == 0 and '"result.json"' in out
    code, _, err = yard("cp", f"{job_id}:out/result.json", str(tmp_path))
    assert code == 0 and (tmp_path / "result.json").read_bytes() == b'{"acc": 0.93}\n' and "result.json" in err
    code, _, _ = yard("cp", f"{job_id}:ckpt.bin", str(tmp_path / "c.bin"), "--task", "worker/1", "-q")
    assert code == 0 and (tmp_path / "c.bin").read_bytes() == bytes(range(256)) * 4
    assert not list(tmp_path.glob("*.part"))
    code, _, err = yard("cp", f"{job_id}:shadow", str(tmp_path / "s"))
    assert code == EXIT_ERROR and "symbolic link" in err and not list(tmp_path.glob("s*"))  # nor s.part
    assert yard("cp", f"{job_id}", str(tmp_path))[0] == EXIT_USAGE
    code, _, err = yard("cp", f"{job_id}:out/result.json", str(tmp_path / "missing" / "r.json"))
    assert code == EXIT_ERROR and "cannot write" in err and "No such file or directory" in err
    code, _, err = yard("cp", "-r", f"{job_id}:", str(tmp_path / "all"), "-q")  # the whole directory, made
    assert code == 0 and (tmp_path / "all" / "out" / "result.json").read_bytes() == b'{"acc": 0.93}\n'
    assert "skipped shadow (link, not copied)" in err and not (tmp_path / "all" / "shadow").exists()
    assert yard("cp", "-r", f"{job_id}:out", str(tmp_path / "new"), "-q")[0] == 0  # made, as cp -r does
    assert yard("cp", "-r", f"{job_id}:out", str(tmp_path / "new"), "-q")[0] == 0  # then into it, by its name
    assert (tmp_path / "new" / "result.json").exists() and (tmp_path / "new" / "out" / "result.json").exists()
    assert yard("ls", "x:out")[0] == EXIT_USAGE


def test_the_sdk_downloads_from_an_offset(api: Api) -> None:
    job_id, _, _ = job_with_files(api)
    sdk = api.sdk(api.user_token)
    assert b"".join(sdk.download(job_id, "ckpt.bin", task="worker/1", offset=1000)) == (bytes(range(256)) * 4)[1000:]
    assert b"".join(sdk.download(job_id, "ckpt.bin", task="worker/1", offset=1024)) == b""  # whole already
    assert [e.name for e in sdk.files(job_id, "out").entries] == ["result.json"]


def test_cp_r_writes_nothing_outside_its_destination_whatever_names_a_server_lists(tmp_path: Path,
                                                                                 capsys: Any) -> None:
    import argparse
    from datetime import UTC, datetime

    from trainyard.cli import files_commands
    from trainyard.schemas.files import FileEntry, FileListing

    now = datetime.now(UTC)
    hostile = [FileEntry(name=n, type="file", size=1, modifiedAt=now) for n in ("../escaped", "/tmp/abs", "..", "ok")]

    class Lying:  # a server (or a man in the middle) that lists names no honest one would
        def files(self, job_id: int, path: str, **_: object) -> FileListing:
            return FileListing(job=job_id, task=None, attempt=None, path=path, entries=hostile, truncated=False)

        def download(self, job_id: int, path: str, **_: object):
            yield b"x"

    args = argparse.Namespace(dest=str(tmp_path / "new"), task=None, attempt=None, quiet=True, q=True)
    files_commands._copy_tree(Lying(), args, 1, "")  # type: ignore[arg-type]
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["ok"]
    assert not (tmp_path / "escaped").exists() and not os.path.exists("/tmp/abs")
    assert "../escaped" in capsys.readouterr().err
