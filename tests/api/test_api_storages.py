"""Storages over HTTP and through the SDK: admins create, grant, revoke and delete; users
list and show what they may mount; a job naming a storage its user may not mount is
refused with the field path and the storage's name."""

from __future__ import annotations

import pytest
from api.harness import Api

from trainyard.client import TrainyardError


def job(storages: str) -> str:
    return f"name: j\nstorages: {storages}\ntaskRoles:\n  w:\n    commands: ['sleep 600']\n"


def submit(api: Api, token: str, text: str) -> tuple[int, dict]:
    response = api.client(token).post("/api/v1/jobs", content=text, headers={"content-type": "application/yaml"})
    return response.status_code, response.json()


def test_an_admin_defines_and_grants_a_storage_and_a_user_sees_only_what_they_may_mount(api: Api) -> None:
    admin, alice = api.sdk(api.admin_token), api.sdk(api.user_token)
    created = admin.create_storage("data", "/srv/data", kind="nfs", description="team data")
    assert (created.name, created.path, created.readOnly, created.access, created.grants) == (
        "data", "/srv/data", False, "read-write", [])
    admin.create_storage("refs", "/srv/refs", read_only=True)
    assert alice.storages() == []
    granted = admin.grant_storage("data", "alice", read_only=True)
    assert [(g.grantee, g.readOnly) for g in granted.grants] == [("alice", True)]
    assert [(s.name, s.access) for s in alice.storages()] == [("data", "read-only")]
    assert alice.storage("data").description == "team data"
    with pytest.raises(TrainyardError) as hidden:
        alice.storage("refs")
    assert hidden.value.status == 404
    assert [s.name for s in admin.storages()] == ["data", "refs"]


def test_writes_are_for_admins_only(api: Api) -> None:
    response = api.user.post("/api/v1/storages", json={"name": "mine", "path": "/srv/mine"})
    assert response.status_code == 403
    api.sdk(api.admin_token).create_storage("data", "/srv/data")
    assert api.user.post("/api/v1/storages/data/grants", json={"grantee": "alice"}).status_code == 403
    assert api.user.delete("/api/v1/storages/data").status_code == 403


def test_bad_requests_get_4xx_with_the_field(api: Api) -> None:
    for body, field in (({"name": "x", "path": "relative"}, "path"), ({"name": "Bad", "path": "/x"}, "name"),
                        ({"name": "x", "path": "/x", "readOnly": "yes"}, "readOnly"),
                        ({"name": "x"}, "path")):
        response = api.admin.post("/api/v1/storages", json=body)
        assert response.status_code == 422, (body, response.text)
        assert field in response.text
    assert api.admin.post("/api/v1/storages/nosuch/grants", json={"grantee": "alice"}).status_code == 404


def test_a_job_naming_an_ungranted_storage_is_refused_403_with_its_path_and_name(api: Api) -> None:
    api.sdk(api.admin_token).create_storage("data", "/srv/data")
    status, body = submit(api, api.user_token, job("[{name: data, mountPath: /data}]"))
    assert status == 403
    assert body["detail"] == ("storages[0].name: you have no grant for storage 'data'; ask an admin "
                              "(`yard storage grant data --user alice`)")
    assert body["errors"][0]["path"] == "storages[0].name"
    status, body = submit(api, api.user_token, job("[{name: nosuch}]"))
    assert status == 422 and body["errors"][0]["path"] == "storages[0].name" and "'nosuch'" in body["detail"]
    status, body = submit(api, api.user_token, job("[{name: data, mountPath: relative}]"))
    assert status == 422 and body["errors"][0]["path"] == "storages[0].mountPath"
    api.sdk(api.admin_token).grant_storage("data", "alice")
    status, body = submit(api, api.user_token, job("[{name: data, mountPath: /data}]"))
    assert status == 201, body
    # The grant is now what the waiting job needs: taking it back is refused unless forced.
    refused = api.admin.delete("/api/v1/storages/data/grants/alice")
    assert refused.status_code == 409 and f"{body['id']} (alice, WAITING)" in refused.json()["detail"]
    result = api.sdk(api.admin_token).delete_storage("data", force=True)
    assert result.stoppedJobs == [body["id"]]


def test_openpai_teamwise_storage_is_no_longer_a_warning_but_checked(api: Api) -> None:
    api.sdk(api.admin_token).create_storage("confignfs", "/srv/nfs")
    text = ("name: j\nextras:\n  com.microsoft.pai.runtimeplugin:\n    - plugin: teamwise_storage\n"
            "      parameters: {storageConfigNames: [confignfs]}\ntaskRoles:\n  w:\n    commands: ['true']\n")
    status, body = submit(api, api.user_token, text)
    assert status == 403
    assert body["errors"][0]["path"] == ("extras.com.microsoft.pai.runtimeplugin[0].parameters."
                                         "storageConfigNames[0]")
    api.sdk(api.admin_token).grant_storage("confignfs", "alice")
    status, body = submit(api, api.user_token, text)
    assert status == 201 and body["warnings"] == []
