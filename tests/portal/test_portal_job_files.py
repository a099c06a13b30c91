"""A job's files in the portal: the job page links them; a folder's listing (links shown,
never followed), a file's view with its text escaped, its download with a range; another
user's job not found; names and bytes the job chose shown as text."""

from __future__ import annotations

import pytest
from api.harness import Api

from portal import harness
from portal.harness import signed_in
from portal.test_portal_jobs import IMG, SCRIPT, job_file, place, submit
from trainyard.services.auth import create_user, get_user
from trainyard.services.passwords import set_password


def test_the_owner_browses_views_and_downloads_a_job_s_files_all_as_text(api: Api,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    job_id = submit(api.user, job_file("train", roles={"worker": 2}))
    keys = place(api, job_id)
    job_dir = api.ctx.backend.job_dir(job_id)  # type: ignore[attr-defined]
    (job_dir / "out").mkdir(parents=True)
    (job_dir / "out" / f"{IMG}.txt").write_text(f"loss 0.1\n{SCRIPT}\n")
    (job_dir / "shadow").symlink_to("/etc/shadow")
    (job_dir / "weights.bin").write_bytes(b"\0\1\2")
    work = api.ctx.backend.work_dir(keys[1])  # type: ignore[attr-defined]
    work.mkdir(parents=True, exist_ok=True)
    (work / "ckpt.pt").write_bytes(b"0123456789")
    client = signed_in(api, "alice")

    assert f'href="/jobs/{job_id}/files"' in client.get(f"/jobs/{job_id}").text
    top = client.get(f"/jobs/{job_id}/files")
    assert top.status_code == 200 and top.headers["content-security-policy"].startswith("default-src 'self'")
    assert f'href="/jobs/{job_id}/files?path=out"' in top.text and "→ <code>/etc/shadow</code>" in top.text
    assert "shadow/files" not in top.text and "path=shadow" not in top.text  # a link is never a link to follow
    folder = client.get(f"/jobs/{job_id}/files", params={"path": "out"}).text
    assert IMG not in folder and "&#34;&gt;&lt;img src=x onerror=alert(1)&gt;.txt" in folder
    view = client.get(f"/jobs/{job_id}/files/view", params={"path": f"out/{IMG}.txt"})
    assert view.status_code == 200 and SCRIPT not in view.text
    assert "loss 0.1\n&lt;script&gt;alert(1)&lt;/script&gt;" in view.text
    assert "A binary file" in client.get(f"/jobs/{job_id}/files/view", params={"path": "weights.bin"}).text
    refused = client.get(f"/jobs/{job_id}/files/view", params={"path": "shadow"})
    assert refused.status_code == 422 and "symbolic link" in refused.text

    task = client.get(f"/jobs/{job_id}/files", params={"task": "worker/1"}).text
    assert "<strong>worker/1</strong> (attempt 0)" in task and "ckpt.pt" in task
    got = client.get(f"/jobs/{job_id}/files/download", params={"path": "ckpt.pt", "task": "worker/1", "attempt": 0},
                     headers={"Range": "bytes=2-4"})
    assert got.status_code == 206 and got.content == b"234" and got.headers["content-range"] == "bytes 2-4/10"
    assert got.headers["content-type"] == "application/octet-stream"
    assert got.headers["content-disposition"].startswith("attachment;")

    with api.ctx.db.session() as session:
        create_user(session, "bob", is_admin=False, clock=api.ctx.clock)
        set_password(session, get_user(session, "admin"), "bob", "bob password")
    monkeypatch.setitem(harness.PASSWORDS, "bob", "bob password")
    bob = signed_in(api, "bob")
    for url in (f"/jobs/{job_id}/files", f"/jobs/{job_id}/files/download?path=ckpt.pt&task=worker/1"):
        assert bob.get(url).status_code == 404, url
    assert signed_in(api, "admin").get(f"/jobs/{job_id}/files", params={"path": "out"}).status_code == 200
