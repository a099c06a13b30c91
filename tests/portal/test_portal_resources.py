"""The portal's environments, storages and images pages in process: who sees what (another
user's private environment and storages not granted to them are not shown, and their forms
answer 403/404 as the API does), what the forms change (the same services as the API), the
refusals with their field, and that names and texts are escaped."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from api.harness import Api
from starlette.testclient import TestClient

from portal.harness import browser, csrf_of, signed_in
from trainyard.backends.base import ImagePull, ImageRemoval, NodeImage
from trainyard.backends.containers import ContainerError
from trainyard.services import admin, environments
from trainyard.services import storages as storage_service
from trainyard.services.auth import create_user, get_user
from trainyard.services.passwords import set_password
from trainyard.store.rows import EnvironmentRow, JobRow

XSS = '<script>alert(1)</script>"><img src=x onerror=alert(1)>'
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;&#34;&gt;&lt;img src=x onerror=alert(1)&gt;"

ADMIN_POSTS = [
    ("/storages", {"name": "data", "path": "/srv/data"}),
    ("/storages/data/grants", {"grantee": "alice"}),
    ("/storages/data/grants/revoke", {"grantee": "alice"}),
    ("/storages/data/delete", {}),
    ("/images/pull", {"image": "python:3.12"}),
    ("/images/evict", {"image": "python:3.12"}),
]


def post(client: TestClient, path: str, data: dict[str, str] | None = None, page: str = "/"):
    return client.post(path, data={"csrf": csrf_of(client.get(page).text), **(data or {})})


def add_member(api: Api, name: str, group: str) -> TestClient:
    """A signed-in user ``name`` in ``group`` (both made here)."""
    with api.ctx.db.session() as session:
        create_user(session, name, is_admin=False, clock=api.ctx.clock)
        set_password(session, get_user(session, "admin"), name, f"{name} password")
        admin.create_group(session, group, clock=api.ctx.clock)
        admin.add_member(session, group, name)
    client = browser(api)
    answer = client.post("/signin", data={"username": name, "password": f"{name} password", "next": "/"})
    assert answer.status_code == 303
    return client


def storage(api: Api, name: str, path: str, *, grants: tuple[tuple[str, bool], ...] = (), **options) -> None:
    with api.ctx.db.session() as session:
        storage_service.create_storage(session, name, path, read_only=options.get("read_only", False),
                                       kind=options.get("kind", ""), description=options.get("description", ""),
                                       clock=api.ctx.clock)
        for grantee, read_only in grants:
            storage_service.grant_storage(session, name, grantee, read_only=read_only)


def rows(page: str, what: str) -> list[str]:
    return re.findall(rf'data-{what}="([^"]+)"', page)


# -- who may do what -----------------------------------------------------------------------


def test_signed_out_pages_send_to_sign_in(api: Api) -> None:
    for path in ("/environments", "/storages", "/images"):
        answer = browser(api).get(path)
        assert answer.status_code == 303 and answer.headers["location"] == f"/signin?next={path}"


@pytest.mark.parametrize(("path", "data"), ADMIN_POSTS, ids=[p for p, _ in ADMIN_POSTS])
def test_a_non_admin_posting_an_admin_form_with_a_valid_secret_gets_403_and_nothing_changes(
        api: Api, path: str, data: dict[str, str]) -> None:
    storage(api, "data", "/srv/data", grants=(("alice", True),))
    answer = post(signed_in(api, "alice"), path, data)
    assert answer.status_code == 403 and "only an admin may do this" in answer.text
    listed = api.admin.get("/api/v1/storages").json()
    assert [(s["name"], [(g["grantee"], g["readOnly"]) for g in s["grants"]]) for s in listed] == [
        ("data", [("alice", True)])]


def test_the_menu_offers_the_three_pages_to_everyone(api: Api) -> None:
    home = signed_in(api, "alice").get("/").text
    assert all(f'href="{path}"' in home for path in ("/environments", "/storages", "/images"))


# -- storages ------------------------------------------------------------------------------


def test_a_user_sees_only_the_storages_granted_to_them_with_their_access_and_no_admin_forms(api: Api) -> None:
    storage(api, "data", "/srv/data", grants=(("alice", True),), kind="nfs")
    storage(api, "scratch", "/srv/scratch", grants=(("admin", False),))
    page = signed_in(api, "alice").get("/storages")
    assert page.status_code == 200
    assert rows(page.text, "storage") == ["data"]
    assert "read-only" in page.text and "/srv/data" in page.text and "/srv/scratch" not in page.text
    assert 'action="/storages' not in page.text and "New storage" not in page.text
    admin_page = signed_in(api, "admin").get("/storages").text
    assert rows(admin_page, "storage") == ["data", "scratch"]
    assert 'action="/storages/data/grants/revoke"' in admin_page and "New storage" in admin_page


def test_an_admin_creates_grants_revokes_and_deletes_a_storage_through_the_forms(api: Api) -> None:
    client = signed_in(api, "admin")
    created = post(client, "/storages", {"name": "data", "path": "/srv/data/", "kind": "nfs",
                                         "description": "team data", "read_only": "true"})
    assert created.status_code == 200 and "created storage data" in created.text
    assert "this server does not see /srv/data" in created.text  # the admin's note on its folder
    granted = post(client, "/storages/data/grants", {"grantee": "alice", "read_only": "true"})
    assert granted.status_code == 200 and "alice may mount data read-only" in granted.text
    shown = api.admin.get("/api/v1/storages/data").json()
    assert (shown["path"], shown["readOnly"], shown["kind"], shown["grants"]) == (
        "/srv/data", True, "nfs", [{"grantee": "alice", "readOnly": True}])
    alices = signed_in(api, "alice").get("/storages").text
    assert rows(alices, "storage") == ["data"] and "does not see" not in alices
    revoked = post(client, "/storages/data/grants/revoke", {"grantee": "alice"})
    assert revoked.status_code == 200 and api.admin.get("/api/v1/storages/data").json()["grants"] == []
    deleted = post(client, "/storages/data/delete")
    assert deleted.status_code == 200 and api.admin.get("/api/v1/storages").json() == []


def test_a_bad_storage_is_refused_with_its_field_and_the_form_kept(api: Api) -> None:
    client = signed_in(api, "admin")
    answer = post(client, "/storages", {"name": "data", "path": "relative/path", "description": "kept"})
    assert answer.status_code == 422
    assert 'data-field="path"' in answer.text and 'value="kept"' in answer.text
    assert post(client, "/storages/nosuch/grants", {"grantee": "alice"}).status_code == 404
    assert post(client, "/storages", {"name": "x" * 65, "path": "/x"}).status_code == 422  # past the field's limit


def test_revoking_a_grant_a_waiting_job_needs_is_refused_then_offered_with_force(api: Api) -> None:
    storage(api, "data", "/srv/data", grants=(("alice", False),))
    job = api.user.post("/api/v1/jobs", content="name: j\nstorages: [{name: data}]\ntaskRoles:\n  w:\n"
                        "    commands: ['sleep 600']\n", headers={"content-type": "application/yaml"})
    assert job.status_code == 201, job.text
    client = signed_in(api, "admin")
    refused = post(client, "/storages/data/grants/revoke", {"grantee": "alice"})
    assert refused.status_code == 409 and "Do it anyway and stop those jobs" in refused.text
    forced = post(client, "/storages/data/grants/revoke", {"grantee": "alice", "force": "true"})
    assert forced.status_code == 200 and f"stopped jobs {job.json()['id']}" in forced.text


def test_storage_texts_are_escaped(api: Api) -> None:
    storage(api, "data", "/srv/data", grants=(("alice", False),), kind="nfs", description=XSS)
    page = signed_in(api, "alice").get("/storages").text
    assert XSS not in page and ESCAPED in page


# -- environments --------------------------------------------------------------------------


def base_environment(api: Api, name: str = "torch") -> None:
    with api.ctx.db.session() as session:
        environments.create_base(session, get_user(session, "admin"), name, path="/opt/envs/torch", image=None,
                                 group=None, clock=api.ctx.clock)


def build_job_of(api: Api, name: str) -> int:
    with api.ctx.db.session() as session:
        job_id = session.query(EnvironmentRow).filter_by(name=name).one().build_job_id
    assert job_id is not None
    return job_id


def test_a_user_builds_an_environment_from_pasted_requirements_and_sees_its_build_job(api: Api) -> None:
    base_environment(api)
    alice = signed_in(api, "alice")
    answer = post(alice, "/environments", {"name": "mine", "requirements": "numpy==2.1.3\r\nrich\r\n",
                                           "base": "torch"}, page="/environments")
    assert answer.status_code == 200, answer.text
    job_id = build_job_of(api, "mine")
    assert f"environment mine is being built by job {job_id}" in answer.text
    assert rows(answer.text, "environment") == ["mine", "torch"]
    assert f'href="/jobs/{job_id}"' in answer.text and "BUILDING" in answer.text
    shown = api.user.get("/api/v1/environments/mine").json()
    assert (shown["base"], shown["requirements"], shown["visibility"]) == ("torch", "numpy==2.1.3\nrich\n", "private")
    assert '<option selected>torch</option>' not in alice.get("/environments").text  # a fresh form after success


def test_a_bad_environment_is_refused_with_its_field(api: Api) -> None:
    alice = signed_in(api, "alice")
    bad_name = post(alice, "/environments", {"name": "Bad Name", "requirements": "rich"})
    assert bad_name.status_code == 422 and 'data-field="name"' in bad_name.text
    assert "rich</textarea>" in bad_name.text  # the form kept
    empty = post(alice, "/environments", {"name": "ok", "requirements": "  "})
    assert empty.status_code == 422 and 'data-field="requirements"' in empty.text
    unknown = post(alice, "/environments", {"name": "ok", "requirements": "rich", "base": "nosuch"})
    assert unknown.status_code in (404, 422) and 'data-field="base"' in unknown.text
    not_mine = post(alice, "/environments", {"name": "ok", "requirements": "rich", "group": "team"})
    assert not_mine.status_code == 404 and 'data-field="group"' in not_mine.text
    assert api.user.get("/api/v1/environments").json() == []


def test_another_users_private_environment_is_neither_shown_nor_deletable(api: Api) -> None:
    bob = add_member(api, "bob", "team")
    post(signed_in(api, "alice"), "/environments", {"name": "secret", "requirements": "rich"})
    assert "secret" not in bob.get("/environments").text
    answer = post(bob, "/environments/secret/delete", page="/environments")
    assert answer.status_code == 404
    assert rows(signed_in(api, "admin").get("/environments").text, "environment") == ["secret"]


def test_a_shared_environment_shows_to_the_group_but_only_its_owner_deletes_it(api: Api) -> None:
    bob = add_member(api, "bob", "team")
    with api.ctx.db.session() as session:
        admin.add_member(session, "team", "alice")
    assert post(signed_in(api, "alice"), "/environments",
                {"name": "shared", "requirements": "rich", "group": "team"}).status_code == 200
    page = bob.get("/environments").text
    assert rows(page, "environment") == ["shared"] and "@team" in page
    assert 'action="/environments/shared/delete"' not in page  # not bob's to delete
    assert f'href="/jobs/{build_job_of(api, "shared")}"' not in page  # nor his to open
    answer = post(bob, "/environments/shared/delete", page="/environments")
    assert answer.status_code == 403 and "only they or an admin" in answer.text


def test_deleting_an_environment_being_built_is_refused_then_forced_stops_its_build(api: Api) -> None:
    alice = signed_in(api, "alice")
    post(alice, "/environments", {"name": "mine", "requirements": "rich"})
    job_id = build_job_of(api, "mine")
    refused = post(alice, "/environments/mine/delete")
    assert refused.status_code == 409 and f"job {job_id} is building it" in refused.text
    assert 'action="/environments/mine/delete"' in refused.text and "Do it anyway" in refused.text
    forced = post(alice, "/environments/mine/delete", {"force": "true"})
    assert forced.status_code == 200 and f"deleted environment mine; stopped its build, job {job_id}" in forced.text
    assert api.user.get("/api/v1/environments").json() == []
    with api.ctx.db.session() as session:
        job = session.get(JobRow, job_id)
        assert job is not None and job.state in ("STOPPING", "STOPPED")


def test_environment_texts_are_escaped(api: Api) -> None:
    alice = signed_in(api, "alice")
    post(alice, "/environments", {"name": "mine", "requirements": XSS.replace("<%", "")})
    page = alice.get("/environments").text
    assert XSS not in page and ESCAPED in page


# -- images --------------------------------------------------------------------------------


def test_everyone_sees_the_images_and_only_admins_get_the_pull_form(api: Api, monkeypatch) -> None:
    node = api.ctx.backend.inventory()[0].name
    pulled = datetime(2026, 11, 20, 8, 30, tzinfo=UTC)
    monkeypatch.setattr(api.ctx.backend, "node_images", lambda: [
        NodeImage(node, "python:3.12", "0123456789ab", 52_000_000, None, pulled),
        NodeImage(node, XSS, "ba9876543210", 1024)])
    page = signed_in(api, "alice").get("/images")
    assert page.status_code == 200
    assert "python:3.12" in page.text and "49.6 MiB" in page.text and "2026-11-20 08:30:00" in page.text
    assert XSS not in page.text and "Pull an image" not in page.text
    assert "Pull an image" in signed_in(api, "admin").get("/images").text


def test_a_failing_container_engine_is_said_not_a_500(api: Api, monkeypatch) -> None:
    def broken() -> list[NodeImage]:
        raise ContainerError("podman: cannot connect")

    monkeypatch.setattr(api.ctx.backend, "node_images", broken)
    page = signed_in(api, "alice").get("/images")
    assert page.status_code == 200 and "No image cache here: podman: cannot connect" in page.text


def test_an_admin_pulls_an_image_through_the_form(api: Api, monkeypatch) -> None:
    node = api.ctx.backend.inventory()[0].name
    asked: list[tuple[str, str | None]] = []

    def pull_image(image: str, where: str | None = None) -> list[ImagePull]:
        asked.append((image, where))
        return [ImagePull(node, image, True, 3.21)]

    monkeypatch.setattr(api.ctx.backend, "pull_image", pull_image)
    answer = post(signed_in(api, "admin"), "/images/pull", {"image": "python:3.12", "node": node})
    # The short name is pulled, and shown, as Docker reads it.
    assert answer.status_code == 200 and f"pulled docker.io/library/python:3.12 on node {node} in 3.2 s" in answer.text
    assert asked == [("docker.io/library/python:3.12", node)]


def test_a_bad_pull_is_refused_with_its_field(api: Api) -> None:
    client = signed_in(api, "admin")
    bad = post(client, "/images/pull", {"image": "--privileged"})
    assert bad.status_code == 422 and 'data-field="image"' in bad.text
    nowhere = post(client, "/images/pull", {"image": "python:3.12", "node": "nowhere"})
    assert nowhere.status_code == 422 and 'data-field="node"' in nowhere.text
    no_engine = post(client, "/images/pull", {"image": "python:3.12"})  # the harness's node has no podman
    assert no_engine.status_code == 422 and "no container engine" in no_engine.text


def test_an_admin_evicts_an_image_from_its_row_and_a_bad_one_is_refused(api: Api, monkeypatch) -> None:
    node = api.ctx.backend.inventory()[0].name
    monkeypatch.setattr(api.ctx.backend, "node_images", lambda: [NodeImage(node, "python:3.12", "0123456789ab", 1)])
    asked: list[tuple[str, str | None]] = []

    def remove_image(image: str, where: str | None = None) -> list[ImageRemoval]:
        asked.append((image, where))
        return [ImageRemoval(node, image, removed=True)]

    monkeypatch.setattr(api.ctx.backend, "remove_image", remove_image)
    admin = signed_in(api, "admin")
    assert 'action="/images/evict"' in admin.get("/images").text
    assert 'action="/images/evict"' not in signed_in(api, "alice").get("/images").text
    answer = post(admin, "/images/evict", {"image": "python:3.12", "node": node}, page="/images")
    assert answer.status_code == 200 and asked == [("docker.io/library/python:3.12", node)]
    assert f"node {node}" in answer.text and "python:3.12" in answer.text
    bad = post(admin, "/images/evict", {"image": "--all"})
    assert bad.status_code == 422 and "not an image reference" in bad.text


# -- the job page --------------------------------------------------------------------------


def test_the_job_page_says_what_each_role_runs_in_and_mounts(api: Api) -> None:
    base_environment(api)
    storage(api, "data", "/srv/data", grants=(("alice", False),))
    text = ("name: j\nenvironment: torch\nstorages: [{name: data, mountPath: /data, readOnly: true}]\n"
            "taskRoles:\n  w:\n    commands: ['sleep 600']\n  p:\n    image: python:3.12\n    commands: ['true']\n")
    job = api.user.post("/api/v1/jobs", content=text, headers={"content-type": "application/yaml"})
    assert job.status_code == 201, job.text
    page = signed_in(api, "alice").get(f"/jobs/{job.json()['id']}").text
    assert "Runs in" in page and rows(page, "role") == ["w", "p"]
    assert 'href="/environments#env-torch"' in page and "python:3.12" in page
    assert "data → /data (read-only)" in page
    plain = api.user.post("/api/v1/jobs", content="name: k\ntaskRoles:\n  w:\n    commands: ['true']\n",
                          headers={"content-type": "application/yaml"})
    assert "Runs in" not in signed_in(api, "alice").get(f"/jobs/{plain.json()['id']}").text


