"""``PUT /vcs/{name}/sharing``: an admin's alone; a rule other than same-user, same-group or
anyone is a 422 naming them, an unknown VC a 404 and the default VC a 409. (Moved here from
tests/e2e/test_gpu_sharing_e2e.py, where it started a `yard up` of its own for these answers;
what the rule does to placement stays there, live.)"""

from __future__ import annotations

from api.harness import Api


def test_only_an_admin_sets_a_vcs_sharing_and_a_bad_rule_is_a_422(api: Api) -> None:
    sdk = api.sdk(api.admin_token)
    assert sdk.create_vc("team", gpus=1).gpuSharing == "same-user"
    sdk.grant_vc("team", "alice")
    assert api.user.put("/api/v1/vcs/team/sharing", json={"gpuSharing": "anyone"}).status_code == 403
    bad = api.admin.put("/api/v1/vcs/team/sharing", json={"gpuSharing": "everyone"})
    assert bad.status_code == 422 and "same-user" in bad.text
    assert api.admin.put("/api/v1/vcs/nope/sharing", json={"gpuSharing": "anyone"}).status_code == 404
    assert api.admin.put("/api/v1/vcs/default/sharing", json={"gpuSharing": "anyone"}).status_code == 409
    assert {v.name: v.gpuSharing for v in sdk.vcs()}["team"] == "same-user"  # nothing refused changed it
