"""`yard submit` sends the project folder with the job, through the real API in process: from
the folder the job file is in, from --workdir, from the job file's own `workdir`; the same
folder twice is stored once; a hostile archive PUT by hand is a 422 naming the member; a
folder past the limit is refused before sending, naming its biggest file; another user's
digest is not theirs to run in."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

import pytest

from trainyard.services.auth import create_token, create_user

JOB = "name: mine\ntaskRoles:\n  main:\n    commands: [python3 train.py]\n"


def folder(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "train.py").write_text("print('hi')\n")
    (root / "pkg").mkdir(exist_ok=True)
    (root / "pkg" / "__init__.py").write_text("")
    (root / "notes.log").write_text("x" * 5000)
    (root / ".gitignore").write_text("*.log\n")
    (root / "job.yaml").write_text(JOB)
    return root


def test_submit_from_the_project_folder_sends_it_once_per_content(yard, api, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    project = folder(tmp_path / "proj")
    monkeypatch.chdir(project)
    code, out, err = yard("submit", "job.yaml", "--dry-run")  # checked, not sent: a dry run makes nothing
    assert code == 0 and "working directory ./: 4 files" in err and "not sent: a dry run" in err, err
    assert not api.ctx.workdirs.root.exists() or list(api.ctx.workdirs.root.iterdir()) == []
    code, out, err = yard("submit", "job.yaml")
    assert code == 0, err
    assert "working directory ./: 4 files" in err and "sha256:" in err  # .gitignore, job.yaml, train.py, pkg/
    job_id = int(out.split()[2])
    code, shown, _ = yard("job", str(job_id), "--json")
    digest = json.loads(shown)["spec"]["workdir"]
    assert digest.startswith("sha256:")
    stored = list(api.ctx.workdirs.root.iterdir())
    code, out, err = yard("clone", str(job_id))  # a clone runs in the same folder, sent once
    assert code == 0, err
    clone_id = int(out.split()[2])
    assert json.loads(yard("job", str(clone_id), "--json")[1])["workdir"]["digest"] == digest
    code, out, err = yard("submit", "job.yaml")  # the same content: no second file
    assert code == 0 and list(api.ctx.workdirs.root.iterdir()) == stored
    monkeypatch.chdir(tmp_path)
    code, out, err = yard("submit", "proj/job.yaml")  # not in the current folder: nothing sent
    assert code == 0 and "sha256:" not in err and "no working directory sent" not in err  # train.py is not here
    laid_out = tmp_path / "laid-out"  # a trial's layout: the job file in a folder of its own, its script here
    (laid_out / "configs").mkdir(parents=True)
    (laid_out / "configs" / "job.yaml").write_text("# submit: yard submit configs/job.yaml\n" + JOB)
    (laid_out / "train.py").write_text("print('hi')\n")
    monkeypatch.chdir(laid_out)
    code, out, err = yard("submit", "configs/job.yaml")
    assert code == 0 and "sha256:" not in err
    assert "no working directory sent: the job file is in configs/, not in this folder; to send this folder " \
           "with the job: --workdir ." in err
    monkeypatch.chdir(tmp_path)
    code, out, err = yard("submit", "proj/job.yaml", "--workdir", "proj")
    assert code == 0 and "working directory proj: 4 files" in err
    monkeypatch.chdir(project)
    (project / "exported.yaml").write_text(f"workdir: {digest}\n" + JOB)  # a job as the server shows it
    code, out, err = yard("submit", "exported.yaml")  # from the folder: runs in the upload it names
    assert code == 0 and "working directory" not in err, err
    assert json.loads(yard("job", out.split()[2], "--json")[1])["workdir"]["digest"] == digest


def test_the_job_files_workdir_is_relative_to_it_and_another_users_digest_is_refused(
        yard, api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = folder(tmp_path / "proj")
    (project / "src").mkdir()
    (project / "src" / "a.py").write_text("A = 1\n")
    (tmp_path / "job.yaml").write_text("workdir: proj/src\n" + JOB)
    # --no-workdir and --dry-run settle the file's own workdir too (the SDK read it again, from
    # the current folder: it sent the folder anyway, or failed "not a folder"), from anywhere.
    for where in (tmp_path, project):
        monkeypatch.chdir(where)
        code, out, err = yard("submit", str(tmp_path / "job.yaml"), "--no-workdir")
        assert code == 0 and "sha256:" not in err, err
        assert json.loads(yard("job", out.split()[2], "--json")[1])["workdir"] is None
        code, out, err = yard("submit", str(tmp_path / "job.yaml"), "--dry-run")
        assert code == 0 and "1 file," in err and "not sent: a dry run" in err, err
    assert not api.ctx.workdirs.root.exists() or list(api.ctx.workdirs.root.iterdir()) == []
    code, out, err = yard("submit", str(tmp_path / "job.yaml"))
    assert code == 0 and "1 file," in err, err
    digest = json.loads(yard("job", out.split()[2], "--json")[1])["spec"]["workdir"]
    with api.ctx.db.session() as session:
        user = create_user(session, "bob", is_admin=False, clock=api.ctx.clock)
        bob = create_token(session, user, by=user, clock=api.ctx.clock)
    refused = api.client(bob).post(f"/api/v1/jobs?workdir={digest}", content=JOB,
                                   headers={"Content-Type": "application/yaml"})
    assert refused.status_code == 404 and "no working directory" in refused.text
    assert api.client(bob).get(f"/api/v1/workdirs/{digest}").status_code == 404
    assert api.user.get(f"/api/v1/workdirs/{digest}").json()["files"] == 1


def test_a_hostile_archive_is_422_naming_the_member_and_a_big_folder_is_refused_before_sending(
        yard, api, tmp_path: Path) -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        info = tarfile.TarInfo("../../etc/cron.d/evil")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    answer = api.user.put("/api/v1/workdirs", content=out.getvalue(), headers={"Content-Type": "application/gzip"})
    assert answer.status_code == 422 and "'..'" in answer.json()["detail"]
    assert answer.json()["errors"][0]["path"] == "<archive>/../../etc/cron.d/evil"
    assert api.user.put("/api/v1/workdirs", content=b"not a tar").status_code == 422
    project = folder(tmp_path / "big")
    with open(project / "model.pt", "wb") as f:
        f.truncate(api.ctx.workdirs.max_bytes + 1)
    code, out_text, err = yard("submit", str(project / "job.yaml"), "--workdir", str(project))
    assert code != 0 and "model.pt" in err and "limit" in err


def test_every_job_of_a_sweep_runs_in_the_folder_sent_once(yard, api, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    project = folder(tmp_path / "proj")
    (project / "job.yaml").write_text("sweep: {grid: {lr: [0.1, 0.2]}}\n" + JOB)
    monkeypatch.chdir(project)
    code, out, err = yard("submit", "job.yaml")
    assert code == 0 and "working directory ./" in err, err
    digests = {json.loads(yard("job", str(job.id), "--json")[1])["workdir"]["digest"]
               for job in api.sdk(api.user_token).jobs().items}
    assert len(digests) == 1 and len(list(api.ctx.workdirs.root.iterdir())) == 1
