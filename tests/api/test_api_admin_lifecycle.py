"""Removing over HTTP: who may, what each answer says, and that a revoked token or a
disabled user is refused from the very next request."""

from __future__ import annotations

import pytest
from api.harness import Api

from trainyard.client import AuthError, TrainyardError

JOB = (
    "name: j\ndefaults: {virtualCluster: VC}\ntaskRoles:\n  m:\n    resourcePerInstance: {gpu: 1}\n"
    "    commands: ['sleep 600']\n"
)


def submit(api: Api, token: str, vc: str = "default") -> int:
    response = api.client(token).post(
        "/api/v1/jobs", content=JOB.replace("VC", vc), headers={"content-type": "application/yaml"}
    )
    assert response.status_code == 201, response.text
    return int(response.json()["id"])


def test_a_user_lists_and_revokes_their_own_tokens_and_a_revoked_token_is_refused_at_once(api: Api) -> None:
    alice = api.sdk(api.user_token)
    spare = alice.create_token(name="laptop").token
    listed = alice.tokens()
    assert [(t.user, t.name) for t in listed] == [("alice", ""), ("alice", "laptop")]
    assert listed[0].lastUsedAt is not None  # this very request used it
    body = api.user.get("/api/v1/tokens").text
    assert api.user_token not in body and spare not in body  # never the secrets
    assert listed[1].prefix == spare[:10]

    laptop = api.sdk(spare)
    assert laptop.me().name == "alice"  # now cached as good
    assert alice.revoke_token(listed[1].id).name == "laptop"
    with pytest.raises(AuthError) as refused:
        laptop.me()
    assert refused.value.status == 401 and refused.value.message == "invalid or revoked token"
    assert [t.name for t in alice.tokens()] == [""]


def test_only_admins_see_and_revoke_other_users_tokens(api: Api) -> None:
    alice, admin = api.sdk(api.user_token), api.sdk(api.admin_token)
    for params in ({"user": "admin"}, {"all": "true"}, {"user": "nobody"}):
        response = api.user.get("/api/v1/tokens", params=params)
        assert response.status_code == 403 and "only an admin" in response.json()["detail"]
    admins = admin.tokens()
    assert api.user.delete(f"/api/v1/tokens/{admins[0].id}").status_code == 404  # not hers: as if not there
    assert {t.user for t in admin.tokens(every_user=True)} == {"admin", "alice"}
    alices = admin.tokens(user="alice")
    assert admin.revoke_token(alices[0].id).user == "alice"
    with pytest.raises(AuthError):
        alice.me()
    unknown = api.admin.get("/api/v1/tokens", params={"user": "nobody"})
    assert unknown.status_code == 404 and "no user named 'nobody'" in unknown.json()["detail"]
    assert api.admin.delete("/api/v1/tokens/0").status_code == 422
    assert api.admin.delete(f"/api/v1/tokens/{2**31}").status_code == 422  # beyond a PostgreSQL integer
    last = api.admin.delete(f"/api/v1/tokens/{admins[0].id}")
    assert last.status_code == 409 and "last token of any admin" in last.json()["detail"]
    assert admin.me().name == "admin"


def test_a_disabled_user_is_refused_saying_so_until_enabled_and_keeps_their_jobs(api: Api) -> None:
    admin, alice = api.sdk(api.admin_token), api.sdk(api.user_token)
    job = submit(api, api.user_token)
    assert alice.me().name == "alice"  # cached as good before the disabling
    result = admin.disable_user("alice")
    assert (result.keptJobs, result.stoppedJobs) == ([job], [])
    with pytest.raises(AuthError) as refused:
        alice.me()
    assert refused.value.status == 401 and "user alice is disabled" in refused.value.message
    assert "yard user enable alice" in refused.value.message
    assert [u.disabled for u in admin.users() if u.name == "alice"] == [True]
    assert admin.job(job).state == "WAITING"
    assert admin.enable_user("alice").disabled is False
    assert alice.me().name == "alice"
    assert admin.disable_user("alice", stop_jobs=True).stoppedJobs == [job]
    assert admin.job(job).state == "STOPPED"


def test_removals_are_for_admins_and_unknown_names_are_404s(api: Api) -> None:
    user = api.user
    for method, path in (
        ("POST", "/users/alice/disable"),
        ("POST", "/users/alice/enable"),
        ("DELETE", "/users/admin"),
        ("DELETE", "/vcs/vision"),
        ("DELETE", "/vcs/vision/grants/alice"),
        ("DELETE", "/groups/cv/members/alice"),
    ):
        response = user.request(method, "/api/v1" + path)
        assert response.status_code == 403 and response.json()["detail"] == "this needs an admin", path
    for method, path, message in (
        ("POST", "/users/carol/disable", "no user named 'carol'"),
        ("DELETE", "/users/carol", "no user named 'carol'"),
        ("DELETE", "/vcs/vision", "no virtual cluster named 'vision'"),
        ("DELETE", "/vcs/vision/grants/alice", "no virtual cluster named 'vision'"),
        ("DELETE", "/groups/cv/members/alice", "no group named 'cv'"),
    ):
        response = api.admin.request(method, "/api/v1" + path)
        assert response.status_code == 404 and message in response.json()["detail"], path
    yourself = api.admin.delete("/api/v1/users/admin")
    assert yourself.status_code == 409 and "cannot delete yourself" in yourself.json()["detail"]


@pytest.mark.postgres
def test_deleting_a_user_with_jobs_is_a_409_naming_them_and_force_stops_them(api: Api) -> None:
    admin = api.sdk(api.admin_token)
    job = submit(api, api.user_token)
    refused = api.admin.delete("/api/v1/users/alice")
    assert refused.status_code == 409
    assert f"they have waiting or running jobs: job {job} (alice, WAITING)" in refused.json()["detail"]
    assert refused.json()["errors"] == [{"path": "force", "message": "1 waiting or running job(s) would be stopped"}]
    result = admin.delete_user("alice", force=True)
    assert (result.done, result.stoppedJobs) == ("deleted user alice", [job])
    with pytest.raises(AuthError):
        api.sdk(api.user_token).me()
    assert "alice" not in [u.name for u in admin.users()]
    assert admin.job(job).user == "alice" and admin.job(job).state == "STOPPED"
    again = api.admin.post("/api/v1/users", json={"name": "alice"})
    assert again.status_code == 409 and "was deleted" in again.json()["detail"]


@pytest.mark.postgres
def test_a_vc_its_grants_and_group_members_are_removed_refusing_while_jobs_depend_on_them(api: Api) -> None:
    admin = api.sdk(api.admin_token)
    admin.create_vc("vision", gpus=2)
    admin.create_group("cv")
    admin.add_member("cv", "alice")
    admin.grant_vc("vision", "@cv")
    job = submit(api, api.user_token, "vision")
    for call in (
        lambda: admin.remove_member("cv", "alice"),
        lambda: admin.revoke_grant("vision", "@cv"),
        lambda: admin.delete_vc("vision"),
    ):
        with pytest.raises(TrainyardError) as refused:
            call()
        assert refused.value.status == 409 and f"job {job} (alice, WAITING)" in refused.value.message
    assert admin.job(job).state == "WAITING"
    assert admin.remove_member("cv", "alice", force=True).stoppedJobs == [job]
    assert admin.groups()[0].members == []
    assert admin.revoke_grant("vision", "@cv").stoppedJobs == []  # nothing depends on it now
    assert admin.delete_vc("vision").done == "deleted virtual cluster vision"
    assert [v.name for v in admin.vcs()] == ["default"]
    assert admin.job(job).vc == "vision"
