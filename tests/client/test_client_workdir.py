"""What ``yard submit`` sends of a project folder: ``.gitignore`` and ``.yardignore`` as git
reads them, never ``.git``, symlinks kept as links, and a folder too big refused before a
byte of it is read, naming its biggest files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainyard.client_workdir import pack
from trainyard.core.workdirs import WorkdirError


def names(folder: Path) -> list[str]:
    import io
    import tarfile

    return tarfile.open(fileobj=io.BytesIO(pack(folder, max_bytes=1 << 20).tar)).getnames()


def test_ignore_files_apply_below_their_folder_yardignore_after_gitignore_and_git_stays_home(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref\n")
    (tmp_path / ".gitignore").write_text("*.pyc\ncheckpoints/\nbuild/\n")
    (tmp_path / ".yardignore").write_text("data/*\n!data/small.csv\n!build/\n")
    for name in ("train.py", "pkg/__init__.py", "pkg/m.pyc", "pkg/sub/deep.py", "checkpoints/c.pt",
                 "data/small.csv", "data/big.bin", "build/model.cfg", "pkg/sub/local.tmp"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    (tmp_path / "pkg" / "sub" / ".gitignore").write_text("*.tmp\n")
    os.symlink("../train.py", tmp_path / "pkg" / "train_link.py")
    assert names(tmp_path) == [".gitignore", ".yardignore", "build", "build/model.cfg", "data", "data/small.csv",
                               "pkg", "pkg/__init__.py", "pkg/sub", "pkg/sub/.gitignore", "pkg/sub/deep.py",
                               "pkg/train_link.py", "train.py"]


def test_trainyards_own_home_inside_the_project_is_never_sent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server started with its home under the project (its database, the admin's token in
    client.json) must not travel with every job submitted from there, whatever the home is called."""
    home = tmp_path / "runs" / "server-home"
    home.mkdir(parents=True)
    (home / "client.json").write_text('{"token": "secret"}')
    (home / "trainyard.db").write_text("db")
    (tmp_path / "train.py").write_text("print(1)\n")
    monkeypatch.setenv("TRAINYARD_HOME", str(home))
    assert names(tmp_path) == ["runs", "train.py"]


def test_a_link_out_of_the_folder_and_a_fifo_are_refused_and_too_big_names_the_biggest(tmp_path: Path) -> None:
    os.symlink("/etc/passwd", tmp_path / "passwd")
    with pytest.raises(WorkdirError, match="outside the working directory"):
        pack(tmp_path, max_bytes=1 << 20)
    (tmp_path / "passwd").unlink()
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(WorkdirError, match="FIFO"):
        pack(tmp_path, max_bytes=1 << 20)
    (tmp_path / "pipe").unlink()
    with open(tmp_path / "huge.bin", "wb") as f:  # sparse: its size is said, its bytes never read
        f.truncate(8 << 30)
    (tmp_path / "train.py").write_text("x")
    with pytest.raises(WorkdirError) as caught:
        pack(tmp_path, max_bytes=1 << 20)
    assert caught.value.biggest[0] == ("huge.bin", 8 << 30) and "huge.bin" in str(caught.value)


@pytest.mark.parametrize("named", ["/etc", "~/.ssh", "../../..", "proj/../..", "link-out"])
def test_a_job_files_workdir_never_names_a_folder_outside_the_job_files_own(tmp_path: Path, named: str) -> None:
    from trainyard.client_errors import UsageError
    from trainyard.client_workdir import folder_for

    (tmp_path / "repo" / "proj").mkdir(parents=True)
    os.symlink("/root", tmp_path / "repo" / "link-out")
    job = tmp_path / "repo" / "job.yaml"
    job.write_text(f"workdir: {named}\nname: j\n")
    with pytest.raises(UsageError, match="not a folder beside it"):
        folder_for(str(job), None)
    job.write_text("workdir: proj\nname: j\n")
    assert folder_for(str(job), None) == (tmp_path / "repo" / "proj").resolve()
    assert folder_for(str(job), "/anywhere/I/say") == Path("/anywhere/I/say")  # said on the command line


def test_the_limit_is_asked_only_of_a_folder_bigger_than_any_server_refuses(api, tmp_path: Path) -> None:
    from trainyard.client_workdir import LEAST_LIMIT_BYTES
    from trainyard.core.settings import Settings

    assert {getattr(m, "ge", None) for m in Settings.model_fields["workdir_max_mb"].metadata} >= \
           {LEAST_LIMIT_BYTES >> 20}  # no server's limit is below it
    sdk, asked = api.sdk(api.user_token), []
    request = sdk._request
    sdk._request = lambda method, path, **kw: asked.append(path) or request(method, path, **kw)  # type: ignore
    (tmp_path / "small").mkdir()
    (tmp_path / "small" / "a.py").write_bytes(b"x" * LEAST_LIMIT_BYTES)
    sdk.upload_workdir(tmp_path / "small")
    assert "/workdirs/limits" not in asked
    (tmp_path / "big").mkdir()
    (tmp_path / "big" / "a.bin").write_bytes(b"y" * (LEAST_LIMIT_BYTES + 1))
    assert sdk.upload_workdir(tmp_path / "big").sizeBytes == LEAST_LIMIT_BYTES + 1
    assert asked.count("/workdirs/limits") == 1
