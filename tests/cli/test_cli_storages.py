"""``yard storage``: an admin creates, grants, revokes and deletes; a user lists and shows
what they may mount; a refusal names the jobs and how to force it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from api.harness import Api

from trainyard.cli.exits import EXIT_AUTH, EXIT_ERROR

Yard = Callable[..., tuple[int, str, str]]  # the `yard` fixture (conftest.py)


def test_an_admin_manages_storages_and_a_user_sees_what_they_may_mount(api: Api, yard: Yard) -> None:
    admin = api.admin_token
    code, out, _ = yard("storage", "create", "data", "/srv/data", "--kind", "nfs", token=admin)
    assert (code, out) == (0, "created storage data at /srv/data\nnote: this server does not see /srv/data: every "
                              "node that runs its jobs must have it mounted there\n")
    code, out, _ = yard("storage", "create", "refs", "/srv/refs", "--read-only", token=admin)
    assert out.startswith("created storage refs at /srv/refs (read-only)\n")
    api.sdk(admin).create_group("cv")
    api.sdk(admin).add_member("cv", "alice")
    code, out, _ = yard("storage", "grant", "data", "--group", "cv", token=admin)
    assert (code, out) == (0, "@cv may now mount storage data (read-write)\n")
    code, out, _ = yard("storage", "grant", "refs", "--user", "alice", token=admin)
    assert out == "alice may now mount storage refs (read-only)\n"

    code, out, _ = yard("storage", "list")
    header, *rows = out.splitlines()
    assert header.split() == ["STORAGE", "PATH", "MODE", "KIND", "YOUR", "ACCESS", "GRANTS"]
    assert [r.split() for r in rows] == [["data", "/srv/data", "rw", "nfs", "read-write", "@cv"],
                                         ["refs", "/srv/refs", "ro", "-", "read-only", "alice"]]
    code, out, _ = yard("storage", "show", "data", "--json")
    assert json.loads(out)["access"] == "read-write"

    code, _, err = yard("storage", "create", "mine", "/srv/mine")
    assert code == EXIT_AUTH and "admin" in err


def test_creating_a_storage_says_when_jobs_could_not_write_to_its_folder(api: Api, yard: Yard, tmp_path) -> None:
    closed, open_ = tmp_path / "closed", tmp_path / "open"
    closed.mkdir(mode=0o755)
    open_.mkdir()
    open_.chmod(0o1777)
    code, out, _ = yard("storage", "create", "closed", str(closed), token=api.admin_token)
    lines = out.splitlines()
    assert code == 0 and lines[0] == f"created storage closed at {closed}"
    if os.geteuid() == 0:  # jobs run as their owners' accounts only under a root server
        assert lines[1].startswith(f"note: {closed} is writable only by its owner and group (mode 0755")
        assert "chmod 1777" in lines[1]
    code, out, _ = yard("storage", "create", "open", str(open_), token=api.admin_token)
    assert out == f"created storage open at {open_}\n"
    code, out, _ = yard("storage", "create", "shelf", str(closed), "--read-only", token=api.admin_token)
    assert out == f"created storage shelf at {closed} (read-only)\n"  # no job writes to it
    code, out, _ = yard("storage", "show", "closed")  # a user is not told the admin's notes
    assert "note:" not in out


def test_revoke_and_delete_refuse_while_a_job_mounts_the_storage_then_force(api: Api, yard: Yard) -> None:
    admin = api.admin_token
    yard("storage", "create", "data", "/srv/data", token=admin)
    yard("storage", "grant", "data", "--user", "alice", token=admin)
    job = api.sdk(api.user_token).submit("name: j\nstorages: [{name: data}]\ntaskRoles:\n  w:\n"
                                         "    commands: ['sleep 600']\n")
    code, _, err = yard("storage", "revoke", "data", "--user", "alice", token=admin)
    assert code == EXIT_ERROR
    assert f"job {job.id} (alice, WAITING)" in err and "`yard storage revoke data --user alice --force`" in err
    code, _, err = yard("storage", "delete", "data", token=admin)
    assert code == EXIT_ERROR and "`yard storage delete data --force`" in err
    code, out, _ = yard("storage", "delete", "data", "--force", token=admin)
    assert code == 0 and out.startswith(f"deleted storage data (its files are untouched); stopped job {job.id}")
    code, out, _ = yard("storage", "list")
    assert out == "no storages you may mount\n"
