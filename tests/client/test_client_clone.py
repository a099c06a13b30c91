"""Running a job again with its secrets: the server keeps them, shows them masked, and a
clone (`Client.clone`, `POST /jobs/{id}/clone`) refills them; a plain submit of the mask is
refused with a pointer to clone. The real app in process, the real SDK, a real database."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from api.harness import Api

from trainyard.client import TrainyardError
from trainyard.spec.templating import MASK
from trainyard.store.rows import JobRow

JOB = (
    "name: train\nsecrets: {key: hunter2, db: {password: pw-77}}\n"
    "taskRoles:\n  m:\n    commands: ['login <% $secrets.key %>', 'echo hunter2 in a command']\n"
)


def stored_spec(api: Api, job_id: int) -> dict[str, Any]:
    """What the server will run: the job file as stored, secrets included (never shown by the API)."""
    with api.ctx.db.session() as session:
        row = session.get(JobRow, job_id)
        assert row is not None
        return dict(row.spec)


def test_a_clone_runs_with_the_originals_secrets_and_its_history_names_the_original(api: Api) -> None:
    alice = api.sdk(api.user_token)
    original = alice.submit(JOB)
    clone = alice.clone(original.id)
    assert clone.id != original.id and (clone.user, clone.name, clone.state) == ("alice", "train", "WAITING")
    assert stored_spec(api, clone.id) == stored_spec(api, original.id)
    assert stored_spec(api, clone.id)["secrets"] == {"key": "hunter2", "db": {"password": "pw-77"}}
    shown = alice.job(clone.id)
    assert shown.spec["secrets"]["key"] == MASK
    assert f"a clone of job {original.id}" in shown.events[0].message


def test_a_clone_takes_a_new_name_vc_and_priority(api: Api) -> None:
    alice = api.sdk(api.user_token)
    original = alice.submit(JOB)
    clone = alice.clone(original.id, name="train-again", vc="default", priority="low")
    assert (clone.name, clone.vc, clone.priority) == ("train-again", "default", "low")
    assert stored_spec(api, clone.id)["secrets"]["key"] == "hunter2"


def test_the_job_as_shown_edited_and_cloned_keeps_the_masked_secrets_and_the_edit(api: Api) -> None:
    alice = api.sdk(api.user_token)
    original = alice.submit(JOB)
    shown = alice.job(original.id).spec
    shown["taskRoles"]["m"]["commands"][0] = "login <% $secrets.key %> --verbose"
    shown["secrets"]["db"]["password"] = "pw-new"
    for edited in (shown, yaml.safe_dump(shown)):  # as a dict (JSON) and as YAML text
        clone = alice.clone(original.id, job_file=edited)
        spec = stored_spec(api, clone.id)
        assert spec["secrets"] == {"key": "hunter2", "db": {"password": "pw-new"}}
        assert spec["taskRoles"]["m"]["commands"] == ["login <% $secrets.key %> --verbose", "echo hunter2 in a command"]


def test_submitting_the_job_as_shown_is_refused_at_each_masked_secret_with_a_pointer_to_clone(api: Api) -> None:
    alice = api.sdk(api.user_token)
    shown = alice.job(alice.submit(JOB).id).spec
    for dry_run in (False, True):
        with pytest.raises(TrainyardError) as refused:
            alice.submit(shown, dry_run=dry_run)
        assert refused.value.status == 422
        assert [e["path"] for e in refused.value.errors] == ["secrets.key", "secrets.db.password"]
        assert "yard clone ID" in refused.value.message
    assert len(alice.jobs().items) == 1


def test_a_mask_the_original_cannot_fill_is_refused_at_its_path(api: Api) -> None:
    alice = api.sdk(api.user_token)
    original = alice.submit(JOB)
    shown = alice.job(original.id).spec
    shown["secrets"]["new"] = MASK
    with pytest.raises(TrainyardError) as refused:
        alice.clone(original.id, job_file=shown)
    assert refused.value.status == 422 and [e["path"] for e in refused.value.errors] == ["secrets.new"]


def test_a_bad_change_is_refused_at_the_field_it_changes(api: Api) -> None:
    alice = api.sdk(api.user_token)
    original = alice.submit(JOB)
    with pytest.raises(TrainyardError) as refused:
        alice.clone(original.id, priority="urgent")
    assert refused.value.status == 422 and [e["path"] for e in refused.value.errors] == ["priority"]
    with pytest.raises(TrainyardError) as refused:
        alice.clone(original.id, vc="nowhere")
    assert refused.value.status == 422 and "nowhere" in refused.value.message


def test_only_the_owner_or_an_admin_may_clone_and_the_admins_clone_is_the_admins(api: Api) -> None:
    admin = api.sdk(api.admin_token)
    theirs = admin.submit(JOB)
    with pytest.raises(TrainyardError) as refused:
        api.sdk(api.user_token).clone(theirs.id)
    assert refused.value.status == 404  # another user's job is not found, as everywhere
    alices = api.sdk(api.user_token).submit(JOB)
    clone = admin.clone(alices.id)
    assert clone.user == "admin" and stored_spec(api, clone.id)["secrets"]["key"] == "hunter2"


def test_clone_over_plain_http_takes_a_yaml_body_or_none(api: Api) -> None:
    job_id = api.sdk(api.user_token).submit(JOB).id
    bare = api.user.post(f"/api/v1/jobs/{job_id}/clone?name=bare")
    assert bare.status_code == 201, bare.text
    shown = api.user.get(f"/api/v1/jobs/{job_id}").json()["spec"]
    body = yaml.safe_dump({**shown, "name": "from-yaml"})
    cloned = api.user.post(f"/api/v1/jobs/{job_id}/clone", content=body, headers={"content-type": "application/yaml"})
    assert cloned.status_code == 201 and cloned.json()["name"] == "from-yaml"
    assert stored_spec(api, cloned.json()["id"])["secrets"]["key"] == "hunter2"
    broken = api.user.post(
        f"/api/v1/jobs/{job_id}/clone", content="name: [", headers={"content-type": "application/yaml"}
    )
    assert broken.status_code == 422 and broken.json()["errors"][0]["path"].startswith("<line")
