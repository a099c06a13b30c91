"""The portal's cluster, VCs, users and tokens pages in process: what each shows, what an
admin changes through them (the same services as the API), and that a non-admin can
neither open the admin pages nor post their forms, even with a valid form secret."""

from __future__ import annotations

import re

import pytest
from api.harness import Api
from services.usage_world import Run, add_job
from starlette.testclient import TestClient

from portal.harness import PASSWORDS, browser, csrf_of, signed_in
from trainyard.core.clock import SystemClock
from trainyard.portal.pages_cluster import NODES_PER_PAGE
from trainyard.services import web_sessions
from trainyard.services.auth import get_user
from trainyard.store.rows import NodeRow, TaskRow

XSS = ('<script>alert(1)</script>', '"><img src=x onerror=alert(1)>')

ADMIN_POSTS = [
    ("/cluster/nodes/NODE/cordon", {}),
    ("/cluster/nodes/NODE/uncordon", {}),
    ("/vcs", {"name": "vision", "gpus": "1"}),
    ("/vcs/vision/quota", {"gpus": "1"}),
    ("/vcs/vision/sharing", {"gpuSharing": "anyone"}),
    ("/vcs/vision/grants", {"grantee": "alice"}),
    ("/vcs/vision/grants/revoke", {"grantee": "alice"}),
    ("/vcs/vision/delete", {}),
    ("/users", {"name": "mallory", "admin": "true"}),
    ("/users/admin/disable", {}),
    ("/users/admin/enable", {}),
    ("/users/admin/delete", {}),
    ("/users/admin/password", {"password": "taken over!"}),
    ("/users/admin/password/clear", {}),
    ("/users/admin/tokens", {"name": "mine now"}),
    ("/users/account", {"user": "admin", "do": "token"}),
    ("/users/tokens/1/revoke", {}),
    ("/users/quotas", {"name": "alice", "priority": "normal", "gpus": ""}),
    ("/users/groups", {"name": "team"}),
    ("/users/groups/team/members", {"name": "alice"}),
    ("/users/groups/team/members/remove", {"name": "alice"}),
]


def node_name(api: Api) -> str:
    with api.ctx.db.session() as session:
        return session.query(NodeRow).one().name


def post(client: TestClient, path: str, data: dict[str, str] | None = None, page: str = "/"):
    return client.post(path, data={"csrf": csrf_of(client.get(page).text), **(data or {})})


def running_job_on(api: Api, owner: str, gpus: list[list[int]]) -> int:
    """A job of ``owner``'s that holds these GPU shares on the harness's node."""
    with api.ctx.db.session() as session:
        job = add_job(session, get_user(session, owner), [[Run(SystemClock().now(), None, gpus=gpus)]])
        for task in session.query(TaskRow).filter_by(job_id=job):
            task.node = node_name(api)
    return job


# -- permissions --------------------------------------------------------------------------


def test_a_non_admin_gets_403_on_the_users_page_by_its_url(api: Api) -> None:
    alice = signed_in(api, "alice")
    answer = alice.get("/users")
    assert answer.status_code == 403 and "this page is for admins" in answer.text
    assert 'href="/users"' not in alice.get("/").text  # and the menu does not offer it


@pytest.mark.parametrize(("path", "data"), ADMIN_POSTS, ids=[p for p, _ in ADMIN_POSTS])
def test_a_non_admin_posting_an_admin_form_with_a_valid_secret_gets_403_and_nothing_changes(
        api: Api, path: str, data: dict[str, str]) -> None:
    alice = signed_in(api, "alice")
    answer = post(alice, path.replace("NODE", node_name(api)), data)
    assert answer.status_code == 403, answer.text
    assert "only an admin may do this" in answer.text
    everything = api.admin.get("/api/v1/users").json()
    assert [u["name"] for u in everything] == ["admin", "alice"] and not everything[0]["disabled"]
    assert not api.admin.get("/api/v1/nodes").json()[0]["cordoned"]


def test_admin_forms_without_the_secret_are_refused(api: Api) -> None:
    admin = signed_in(api, "admin")
    answer = admin.post("/users", data={"name": "mallory"})
    assert answer.status_code == 403 and "out of date or came from another site" in answer.text
    assert "mallory" not in api.admin.get("/api/v1/users").text


def test_signed_out_pages_send_to_sign_in(api: Api) -> None:
    for path in ("/cluster", "/vcs", "/users", "/usage"):
        answer = browser(api).get(path)
        assert answer.status_code == 303 and answer.headers["location"] == f"/signin?next={path}"


# -- cluster ------------------------------------------------------------------------------


def test_the_cluster_page_draws_every_gpu_coloured_by_allocation(api: Api) -> None:
    mine = running_job_on(api, "alice", [[0, 1000], [1, 500]])
    theirs = running_job_on(api, "admin", [[1, 500]])
    page = signed_in(api, "alice").get("/cluster").text
    boxes = re.findall(r'data-gpu="(\d)" data-allocation="(\w+)"', page)
    assert boxes == [("0", "fully"), ("1", "fully"), ("2", "free"), ("3", "free")]
    tooltips = re.findall(r'title="(GPU \d[^"]*)"', page)
    assert re.findall(r"jobs ([\d, ]+)", tooltips[1]) == [str(mine)]  # not the admin's job: not hers to see
    assert "stale" in page  # no sample of the node yet: its figures are not measured now
    assert 'hx-get="/cluster/nodes?page=1"' in page and 'hx-trigger="every 5s"' in page
    assert "Cordon" not in page  # no admin buttons for a user
    admin_view = signed_in(api, "admin").get("/cluster/nodes").text
    assert f"jobs {mine}, {theirs}" in admin_view
    assert "Nodes 1–" not in admin_view  # one page: no pager
    assert "<html" not in admin_view  # the fragment the polling swaps in


def test_the_cluster_page_shows_each_nodes_labels_with_the_admins_over_the_backends(api: Api) -> None:
    name = api.admin.get("/api/v1/nodes").json()[0]["name"]
    assert api.admin.patch(f"/api/v1/nodes/{name}/labels", json={"labels": {"ib": "true"}}).status_code == 200
    page = signed_in(api, "alice").get("/cluster").text
    assert '<p class="labels hint"><code>ib=true</code></p>' in page


def test_a_large_cluster_is_shown_a_page_of_nodes_at_a_time(api: Api) -> None:
    now = SystemClock().now()
    with api.ctx.db.session() as session:
        for n in range(NODES_PER_PAGE + 10):
            session.add(NodeRow(name=f"gpu-{n:03d}", backend="local", address="10.0.0.1", cpu_milli=1000,
                                memory_mb=1024, schedulable=True, cordoned=False, labels={}, updated_at=now,
                                gpus=[{"index": 0, "model": "A100", "memory_mb": 81920}]))
    alice = signed_in(api, "alice")
    first = alice.get("/cluster").text
    assert first.count("<article") == NODES_PER_PAGE and f"Nodes 1–{NODES_PER_PAGE} of {NODES_PER_PAGE + 11}" in first
    second = alice.get("/cluster", params={"page": 2}).text
    assert second.count("<article") == 11 and 'data-node="gpu-050"' in second and 'data-node="gpu-049"' not in second
    assert 'hx-get="/cluster/nodes?page=2"' in second and 'href="/cluster?page=1"' in second
    assert alice.get("/cluster", params={"page": 99}).text.count("<article") == 11  # past the end: the last
    assert alice.get("/cluster", params={"page": 0}).status_code == 422


def test_an_admin_cordons_and_uncordons_a_node(api: Api) -> None:
    admin, node = signed_in(api, "admin"), node_name(api)
    answer = post(admin, f"/cluster/nodes/{node}/cordon", page="/cluster")
    assert answer.status_code == 303 and answer.headers["location"] == "/cluster"
    assert api.admin.get("/api/v1/nodes").json()[0]["cordoned"] is True
    page = admin.get("/cluster").text
    assert "cordoned</span>" in page and ">Uncordon</button>" in page
    post(admin, f"/cluster/nodes/{node}/uncordon", page="/cluster")
    assert api.admin.get("/api/v1/nodes").json()[0]["cordoned"] is False
    assert post(admin, "/cluster/nodes/nowhere/cordon", page="/cluster").status_code == 404


# -- VCs ----------------------------------------------------------------------------------


def test_an_admin_creates_a_vc_grants_it_and_its_user_sees_it(api: Api) -> None:
    admin = signed_in(api, "admin")
    created = post(admin, "/vcs", {"name": "vision", "gpus": "2", "preemption": "true"}, page="/vcs")
    assert created.status_code == 200 and "created virtual cluster vision" in created.text
    post(admin, "/vcs/vision/quota", {"gpus": "3"}, page="/vcs")
    post(admin, "/vcs/vision/grants", {"grantee": "alice"}, page="/vcs")
    vc = next(v for v in api.admin.get("/api/v1/vcs").json() if v["name"] == "vision")
    assert vc["quota"] == {"*": 3} and vc["users"] == ["alice"]
    alice_page = signed_in(api, "alice").get("/vcs").text
    assert 'data-vc="vision"' in alice_page
    assert "Set quota" not in alice_page and "New virtual cluster" not in alice_page


def test_an_admin_sets_a_vcs_gpu_sharing_at_creation_and_after(api: Api) -> None:
    admin = signed_in(api, "admin")
    post(admin, "/vcs", {"name": "vision", "gpus": "2", "gpuSharing": "same-group"}, page="/vcs")
    rule = {v["name"]: v["gpuSharing"] for v in api.admin.get("/api/v1/vcs").json()}
    assert rule["vision"] == "same-group"
    page = post(admin, "/vcs/vision/sharing", {"gpuSharing": "anyone"}, page="/vcs")
    assert page.status_code == 200 and "vision: fractional GPUs shared with anyone" in page.text
    assert {v["name"]: v["gpuSharing"] for v in api.admin.get("/api/v1/vcs").json()}["vision"] == "anyone"
    assert "<option selected>anyone</option>" in page.text  # the form shows the rule in force
    unknown = post(admin, "/vcs/vision/sharing", {"gpuSharing": "everybody"}, page="/vcs")
    assert unknown.status_code == 422 and "unknown GPU sharing rule &#39;everybody&#39;" in unknown.text
    refused = post(admin, "/vcs", {"name": "nlp", "gpus": "1", "gpuSharing": "everybody"}, page="/vcs")
    assert refused.status_code == 422 and 'data-field="gpuSharing"' in refused.text
    assert {v["name"]: v["gpuSharing"] for v in api.admin.get("/api/v1/vcs").json()}["vision"] == "anyone"


def test_a_vc_refusal_shows_on_the_page_with_its_status(api: Api) -> None:
    admin = signed_in(api, "admin")
    over = post(admin, "/vcs", {"name": "huge", "gpus": "99"}, page="/vcs")
    assert over.status_code == 422 and "the cluster has 4" in over.text and 'value="huge"' in over.text
    bad = post(admin, "/vcs", {"name": "Bad Name", "gpus": "1"}, page="/vcs")
    assert bad.status_code == 422 and 'data-field="name"' in bad.text
    assert post(admin, "/vcs", {"name": "x", "gpus": "many"}, page="/vcs").status_code == 422


def test_deleting_a_vc_with_jobs_is_refused_and_offers_to_stop_them(api: Api) -> None:
    admin = signed_in(api, "admin")
    post(admin, "/vcs", {"name": "vision", "gpus": "1"}, page="/vcs")
    post(admin, "/vcs/vision/grants", {"grantee": "alice"}, page="/vcs")
    job = api.user.post("/api/v1/jobs", content="name: j\ndefaults: {virtualCluster: vision}\ntaskRoles:\n  m:\n"
                        "    commands: ['sleep 1']\n", headers={"content-type": "application/yaml"}).json()["id"]
    refused = post(admin, "/vcs/vision/delete", page="/vcs")
    assert refused.status_code == 409 and f"job {job} (alice, WAITING)" in refused.text
    assert "Do it anyway and stop those jobs" in refused.text and 'action="/vcs/vision/delete"' in refused.text
    forced = post(admin, "/vcs/vision/delete", {"force": "true"}, page="/vcs")
    assert forced.status_code == 200 and f"deleted virtual cluster vision; stopped jobs {job}" in forced.text
    assert api.user.get(f"/api/v1/jobs/{job}").json()["state"] == "STOPPED"


# -- users, groups, tokens ----------------------------------------------------------------


def test_an_admin_creates_a_user_with_a_password_who_then_signs_in(api: Api) -> None:
    admin = signed_in(api, "admin")
    created = post(admin, "/users", {"name": "bob", "password": "bob's password", "current": PASSWORDS["admin"]},
                   page="/users")
    assert created.status_code == 200 and "created user bob; they sign in with a password" in created.text
    assert browser(api).post("/signin", data={"username": "bob", "password": "bob's password"}).status_code == 303
    taken = post(admin, "/users", {"name": "bob"}, page="/users")
    assert taken.status_code == 409 and "already exists" in taken.text


def test_an_admin_session_alone_sets_no_password_and_makes_no_user_with_one(api: Api) -> None:
    """A stolen admin session must not make itself a login that outlives it: setting its own
    password, another admin's, or creating an admin with a password asks for the admin's own
    password again (issue 27's red team: all three worked without it)."""
    admin = signed_in(api, "admin")
    for path, data in (("/users/admin/password", {"password": "taken over!"}),
                       ("/users/account", {"user": "admin", "do": "password", "password": "taken over!"}),
                       ("/users/alice/password", {"password": "taken over!", "current": "a guess"}),
                       ("/users", {"name": "evil", "admin": "true", "password": "taken over!"})):
        refused = post(admin, path, data, page="/users")
        assert refused.status_code == 403 and "give your password again" in refused.text, path
    for name in ("admin", "alice", "evil"):
        assert browser(api).post("/signin", data={"username": name, "password": "taken over!"}).status_code != 303
    assert "evil" not in [user["name"] for user in api.admin.get("/api/v1/users").json()]


def test_disabling_a_user_ends_their_browser_sessions_and_enabling_lets_them_back(api: Api) -> None:
    admin, alice = signed_in(api, "admin"), signed_in(api, "alice")
    assert "alice cannot sign in until enabled" in post(admin, "/users/alice/disable", page="/users").text
    assert alice.get("/").status_code == 303
    assert api.user.get("/api/v1/me").status_code == 401
    post(admin, "/users/alice/enable", page="/users")
    assert api.user.get("/api/v1/me").status_code == 200


def test_an_admin_resets_a_password_and_the_user_is_signed_out(api: Api) -> None:
    admin, alice = signed_in(api, "admin"), signed_in(api, "alice")
    assert "set alice&#39;s password" in post(admin, "/users/alice/password",
                                           {"password": "brand new one", "current": PASSWORDS["admin"]},
                                           page="/users").text
    assert alice.get("/").status_code == 303  # her old session is over
    assert browser(api).post("/signin", data={"username": "alice", "password": "brand new one"}).status_code == 303
    short = post(admin, "/users/alice/password", {"password": "short", "current": PASSWORDS["admin"]}, page="/users")
    assert short.status_code == 422 and "8 to 1024 characters" in short.text
    cleared = post(admin, "/users/alice/password/clear", page="/users")
    assert "removed alice&#39;s password" in cleared.text
    assert api.admin.get("/api/v1/users").json()[1]["hasPassword"] is False


def test_deleting_yourself_is_refused_and_deleting_a_user_revokes_their_tokens(api: Api) -> None:
    admin = signed_in(api, "admin")
    assert post(admin, "/users/admin/delete", page="/users").status_code == 409
    assert "deleted user alice" in post(admin, "/users/alice/delete", page="/users").text
    assert api.user.get("/api/v1/me").status_code == 401


def test_an_admin_issues_a_token_shown_once_and_revokes_it(api: Api) -> None:
    admin = signed_in(api, "admin")
    issued = post(admin, "/users/alice/tokens", {"name": "ci", "current": PASSWORDS["admin"]}, page="/users")
    token = re.search(r'value="(ty_[^"]+)"', issued.text)
    assert token is not None
    assert api.client(token.group(1)).get("/api/v1/me").json()["name"] == "alice"
    listing = admin.get("/users").text
    assert token.group(1) not in listing and token.group(1)[:10] + "…" in listing
    token_id = next(t["id"] for t in api.admin.get("/api/v1/tokens?all=true").json() if t["name"] == "ci")
    revoked = post(admin, f"/users/tokens/{token_id}/revoke", page="/users")
    assert f"revoked token {token_id} of alice" in revoked.text
    assert api.client(token.group(1)).get("/api/v1/me").status_code == 401


def test_the_one_account_form_resets_clears_and_issues(api: Api) -> None:
    admin = signed_in(api, "admin")
    reset = post(admin, "/users/account", {"user": "alice", "do": "password", "password": "via the form",
                                           "current": PASSWORDS["admin"]}, page="/users")
    assert "set alice&#39;s password" in reset.text
    assert browser(api).post("/signin", data={"username": "alice", "password": "via the form"}).status_code == 303
    issued = post(admin, "/users/account", {"user": "alice", "do": "token", "token_name": "ci",
                                     "current": PASSWORDS["admin"]}, page="/users")
    assert "New token for alice" in issued.text
    cleared = post(admin, "/users/account", {"user": "alice", "do": "clear"}, page="/users")
    assert "removed alice&#39;s password" in cleared.text
    assert post(admin, "/users/account", {"user": "alice", "do": "explode"}, page="/users").status_code == 422
    only_hers = admin.get("/users", params={"tokens": "alice"}).text.split("<h2>Tokens</h2>")[1]
    assert "ci" in only_hers and "local client file" not in only_hers


def test_groups_members_and_quotas(api: Api) -> None:
    admin = signed_in(api, "admin")
    assert "created group team" in post(admin, "/users/groups", {"name": "team"}, page="/users").text
    assert "alice is in group team" in post(admin, "/users/groups/team/members", {"name": "alice"},
                                            page="/users").text
    assert api.admin.get("/api/v1/groups").json() == [{"name": "team", "members": ["alice"]}]
    assert "alice is no longer in group team" in post(admin, "/users/groups/team/members/remove", {"name": "alice"},
                                                      page="/users").text
    set_quota = post(admin, "/users/quotas", {"name": "alice", "priority": "normal", "gpus": "1.5"}, page="/users")
    assert "alice at normal: at most 1.5 GPUs" in set_quota.text
    assert api.admin.get("/api/v1/quotas").json() == [{"user": "alice", "priority": "normal", "gpus": 1.5}]
    bad = post(admin, "/users/quotas", {"name": "alice", "priority": "normal", "gpus": "-2"}, page="/users")
    assert bad.status_code == 422 and 'data-field="gpus"' in bad.text
    post(admin, "/users/quotas", {"name": "alice", "priority": "normal", "gpus": ""}, page="/users")
    assert api.admin.get("/api/v1/quotas").json() == []


# -- one's own tokens on /account -----------------------------------------------------------


def test_a_user_creates_lists_and_revokes_their_own_tokens(api: Api) -> None:
    alice = signed_in(api, "alice")
    made = post(alice, "/account/tokens", {"name": "laptop", "current": PASSWORDS["alice"]}, page="/account")
    token = re.search(r'value="(ty_[^"]+)"', made.text)
    assert made.status_code == 200 and token is not None and "shown only now" in made.text
    page = alice.get("/account").text
    assert token.group(1) not in page and "laptop" in page and api.user_token[:10] + "…" in page
    laptop = next(t["id"] for t in api.user.get("/api/v1/tokens").json() if t["name"] == "laptop")
    assert "refused from now on" in post(alice, f"/account/tokens/{laptop}/revoke", page="/account").text
    assert api.client(token.group(1)).get("/api/v1/me").status_code == 401
    not_hers = post(alice, "/account/tokens/1/revoke", page="/account")  # the admin's
    assert not_hers.status_code == 404


def test_changing_ones_password_keeps_this_session_and_ends_the_others(api: Api) -> None:
    here, elsewhere = signed_in(api, "alice"), signed_in(api, "alice")
    answer = post(here, "/account/password", {"current": "alice password", "password": "newer password",
                                              "again": "newer password"}, page="/account")
    assert answer.status_code == 200 and "your password is changed" in answer.text
    assert here.get("/account").status_code == 200 and elsewhere.get("/account").status_code == 303


# -- hostile names are shown as text ------------------------------------------------------


@pytest.mark.parametrize("payload", XSS)
def test_token_names_are_shown_as_text(api: Api, payload: str) -> None:
    alice, admin = signed_in(api, "alice"), signed_in(api, "admin")
    post(alice, "/account/tokens", {"name": payload, "current": PASSWORDS["alice"]}, page="/account")
    post(admin, "/users/alice/tokens", {"name": payload, "current": PASSWORDS["admin"]}, page="/users")
    for page in (alice.get("/account").text, admin.get("/users").text):
        assert payload not in page
        assert payload.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&#34;") in page


@pytest.mark.parametrize("payload", XSS)
def test_hostile_names_in_forms_and_refusals_are_shown_as_text(api: Api, payload: str) -> None:
    admin = signed_in(api, "admin")
    for path, data in (("/vcs", {"name": payload, "gpus": "1"}), ("/users", {"name": payload}),
                       ("/users/groups", {"name": payload}), ("/vcs/default/grants", {"grantee": payload})):
        answer = post(admin, path, data, page="/users")
        assert answer.status_code in (404, 422) and payload not in answer.text, path
    usage = admin.get("/usage", params={"user": payload})
    assert usage.status_code == 404 and payload not in usage.text and "&lt;" in usage.text


def test_a_stolen_session_cookie_is_useless_after_a_password_change(api: Api) -> None:
    with api.ctx.db.session() as session:
        stolen = web_sessions.sign_in_with_token(session, api.user_token, clock=SystemClock())
    assert stolen is not None
    alice = signed_in(api, "alice")
    post(alice, "/account/password", {"current": "alice password", "password": "fresh password",
                                      "again": "fresh password"}, page="/account")
    thief = browser(api)
    thief.cookies.set("trainyard_session", stolen.cookie)
    assert thief.get("/").status_code == 303
