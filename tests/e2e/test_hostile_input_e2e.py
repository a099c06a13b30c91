"""Hostile input against a real ``yard up``: refused with 4xx at the field, the server stays up,
and a user learns nothing about other users' work from dry runs, VC lists or node lists."""

from __future__ import annotations

import json

import httpx
import pytest
from deadlines import scaled

from e2e.hostile_corpus import CORPUS
from e2e.server import Server, wait_until
from trainyard.client import Client, TrainyardError

pytestmark = [pytest.mark.e2e, pytest.mark.idle_cluster]  # the worker's shared `yard up` (conftest.py)

MEDIA = {"yaml": "application/yaml", "json": "application/json"}


def test_every_hostile_job_file_gets_a_4xx_naming_the_field_and_the_server_stays_up(server: Server) -> None:
    token = json.loads((server.home / "client.json").read_text())["token"]
    logged = len(server.log())  # a shared server's log of the tests before
    answers = {}
    with httpx.Client(base_url=server.url + "/api/v1", headers={"Authorization": f"Bearer {token}"},
                      timeout=scaled(30)) as http:
        before = http.get("/jobs").json()["items"]  # a shared server's earlier jobs, all ended
        for case in CORPUS:
            for dry in (False, True):
                reply = http.post("/jobs", content=case.body, params={"dryRun": str(dry).lower()},
                                  headers={"Content-Type": MEDIA[case.content_type]})
                answers[case.name, dry] = reply.status_code
                assert reply.status_code == case.status, (case.name, reply.text[:300])
                body = reply.json()
                assert body["detail"]
                if case.status == 422:
                    assert body["errors"][0]["path"].startswith(case.path), (case.name, body["errors"])
            assert server.process.poll() is None, f"yard up died on {case.name}:\n{server.log()[-2000:]}"
        assert http.get("/healthz").status_code == 200
        # Nothing was stored, and a plain job still runs.
        assert http.get("/jobs").json()["items"] == before
    admin = server.admin()
    job = admin.submit("name: ok\ntaskRoles: {m: {commands: ['echo fine']}}\n")
    assert admin.wait(job.id, timeout=scaled(30)).state == "SUCCEEDED"
    assert "Traceback" not in server.log()[logged:]


@pytest.mark.own_server  # it makes VCs, which every test after it would inherit, and counts them
def test_dry_runs_vc_lists_and_node_lists_show_a_user_only_what_is_theirs(server: Server) -> None:
    admin = server.admin()
    for name in ("alice", "bob", "carol"):
        admin.create_user(name)
    alice = Client(server.url, admin.create_token(user="alice").token)
    bob = Client(server.url, admin.create_token(user="bob").token)
    assert server.yard("vc", "create", "vision", "--gpus", "1").returncode == 0
    assert server.yard("vc", "create", "speech", "--gpus", "1").returncode == 0
    assert server.yard("vc", "grant", "vision", "alice").returncode == 0
    assert server.yard("vc", "grant", "vision", "carol").returncode == 0
    assert server.yard("group", "create", "asr").returncode == 0
    assert server.yard("group", "add", "asr", "bob").returncode == 0
    assert server.yard("vc", "grant", "speech", "@asr").returncode == 0
    assert server.yard("quota", "set", "bob", "--priority", "normal", "--gpus", "1").returncode == 0

    # A dry run refuses exactly what the submit refuses, with the same status.
    in_vision = "name: v\ndefaults: {virtualCluster: vision}\ntaskRoles: {m: {commands: ['true']}}\n"
    two_gpus = "name: g\ndefaults: {virtualCluster: speech}\npriority: oppo\n" \
               "taskRoles: {m: {commands: ['true'], resourcePerInstance: {gpu: 2}}}\n"
    for text, status in ((in_vision, 403), (in_vision.replace("vision", "nowhere"), 422),
                         (two_gpus.replace("oppo", "normal"), 422)):
        for dry in (True, False):
            with pytest.raises(TrainyardError) as refused:
                bob.submit(text, dry_run=dry)
            assert refused.value.status == status, (text, dry, refused.value.message)
    assert bob.submit(two_gpus, dry_run=True).valid is True

    # VC lists: bob sees default and speech (through his group), and no one else's names.
    seen = {v.name: v for v in bob.vcs()}
    assert sorted(seen) == ["default", "speech"]
    assert seen["speech"].groups == ["asr"] and seen["speech"].users == []
    assert {v.name: v.users for v in alice.vcs()} == {"default": ["everyone"], "vision": ["alice"]}
    assert {v.name for v in admin.vcs()} == {"default", "speech", "vision"}
    assert sorted(next(v for v in admin.vcs() if v.name == "vision").users) == ["alice", "carol"]

    # Node lists: bob sees that a GPU is used, not by which of alice's jobs.
    running = alice.submit("name: r\ndefaults: {virtualCluster: vision}\n"
                           "taskRoles: {m: {commands: ['sleep 600'], resourcePerInstance: {gpu: 1}}}\n")
    wait_until(lambda: alice.job(running.id).state == "RUNNING", what="alice's job to run")
    def used(client: Client) -> list[tuple[float, list[int]]]:
        return [(g.used, g.jobs) for n in client.nodes() for g in n.gpus if g.used]
    assert used(bob) == [(1.0, [])]
    assert used(alice) == [(1.0, [running.id])]
    assert used(admin) == [(1.0, [running.id])]
    alice.stop(running.id)
