"""Cluster administration through the CLI: VCs, grants, groups, quotas, cordons."""

from __future__ import annotations

import json

import pytest
from deadlines import scaled

from e2e.server import Server, wait_until
from trainyard.client import Client, TrainyardError

pytestmark = [pytest.mark.e2e, pytest.mark.shares_server]  # one `yard up` for the file (conftest.py)


# On SQLite alone: the VC, grant, group, quota, cordon and token queries behind these commands
# run on both databases in tests/store, tests/services and tests/api (marked postgres), and
# `yard up` on PostgreSQL is smoke-tested by test_jobs_e2e.py and test_crash_safety_e2e.py.
def test_vcs_groups_quotas_and_cordons_are_managed_without_restarts(server: Server) -> None:
    admin = server.admin()
    admin.create_user("alice")
    admin.create_user("bob")
    alice = Client(server.url, admin.create_token(user="alice").token)
    bob = Client(server.url, admin.create_token(user="bob").token)

    assert server.yard("vc", "create", "vision", "--gpus", "2").returncode == 0
    assert server.yard("group", "create", "cv").returncode == 0
    assert server.yard("group", "add", "cv", "alice").returncode == 0
    assert server.yard("vc", "grant", "vision", "@cv").returncode == 0
    vcs = {v["name"]: v for v in json.loads(server.yard("vc", "list", "--json").stdout)}
    assert vcs["vision"]["quota"] == {"*": 2} and vcs["vision"]["groups"] == ["cv"]
    assert "default" in vcs
    listed = server.yard("vc", "list").stdout
    assert "vision" in listed
    assert vcs["default"]["quota"] == {"V100": 2}  # the server's 4 GPUs less vision's 2
    assert "the rest: 2 × V100" in listed

    in_vision = "name: v\ndefaults: {virtualCluster: vision}\ntaskRoles:\n  m:\n    commands: ['true']\n"
    assert alice.wait(alice.submit(in_vision).id, timeout=scaled(30)).state == "SUCCEEDED"
    with pytest.raises(TrainyardError) as refused:
        bob.submit(in_vision)
    assert refused.value.status == 403 and "yard vc grant vision bob" in refused.value.message
    with pytest.raises(TrainyardError) as unknown:
        bob.submit(in_vision.replace("vision", "nowhere"))
    assert unknown.value.status == 422 and "no virtual cluster named 'nowhere'" in unknown.value.message
    with pytest.raises(TrainyardError) as misspelt:  # an admin may use every VC, but not one that is not there
        admin.submit(in_vision.replace("vision", "visoin"))
    assert misspelt.value.status == 422 and "no virtual cluster named 'visoin'" in misspelt.value.message

    too_much = server.yard("vc", "create", "speech", "--gpus", "3")  # 2 + 3 > 4 GPUs
    assert too_much.returncode == 1 and "the cluster has 4" in too_much.stderr
    assert server.yard("vc", "quota", "vision", "--gpus", "3").returncode == 0

    assert server.yard("quota", "set", "alice", "--priority", "prod", "--gpus", "1").returncode == 0
    assert json.loads(server.yard("quota", "list", "--json").stdout) == [
        {"user": "alice", "priority": "prod", "gpus": 1.0}]

    node = admin.nodes()[0].name
    assert server.yard("node", "cordon", node).returncode == 0
    assert "cordoned" in server.yard("nodes").stdout
    job = admin.submit("name: c\ntaskRoles:\n  m:\n    commands: ['true']\n")
    wait_until(lambda: admin.job(job.id).pending, what="a pending reason on the cordoned node")
    assert admin.job(job.id).state == "WAITING"
    assert server.yard("node", "uncordon", node).returncode == 0
    assert admin.wait(job.id, timeout=scaled(30)).state == "SUCCEEDED"

    for args in (("vc", "create", "x", "--gpus", "1"), ("group", "create", "g"), ("node", "cordon", node),
                 ("quota", "set", "bob", "--priority", "low", "--gpus", "1")):
        out = server.yard(*args, token=bob.create_token().token)
        assert out.returncode == 4 and "admin" in out.stderr


def test_a_revoked_token_and_a_disabled_user_are_refused_by_a_running_server(server: Server) -> None:
    admin = server.admin()
    admin.create_user("carol")
    created = server.yard("token", "create", "--user", "carol", "--name", "notebook", "--json")
    assert created.returncode == 0 and "keep it in a file only you can read" in created.stderr
    token = json.loads(created.stdout)["token"]
    assert server.yard("whoami", token=token).stdout == "carol\n"

    listed = json.loads(server.yard("token", "list", "--json", token=token).stdout)
    assert [(t["name"], t["user"]) for t in listed] == [("notebook", "carol")] and token not in str(listed)
    assert listed[0]["lastUsedAt"] is not None
    revoked = server.yard("token", "revoke", str(listed[0]["id"]), token=token)
    assert revoked.returncode == 0 and "refused from now on" in revoked.stdout
    refused = server.yard("whoami", token=token)
    assert refused.returncode == 4 and "invalid or revoked token" in refused.stderr

    again = admin.create_token(user="carol").token
    job = Client(server.url, again).submit("name: s\ntaskRoles:\n  m:\n    commands: ['sleep 600']\n").id
    wait_until(lambda: admin.job(job).state == "RUNNING", what="carol's job running")
    disabled = server.yard("user", "disable", "carol")
    assert disabled.returncode == 0 and f"job {job} goes on" in disabled.stdout
    refused = server.yard("whoami", token=again)
    assert refused.returncode == 4 and "user carol is disabled" in refused.stderr
    assert admin.job(job).state == "RUNNING"
    deleted = server.yard("user", "delete", "carol")
    assert deleted.returncode == 1 and f"job {job} (carol, RUNNING)" in deleted.stderr
    assert server.yard("user", "delete", "carol", "--force").returncode == 0
    assert admin.wait(job, timeout=scaled(60)).state == "STOPPED"
    assert admin.job(job).user == "carol"
