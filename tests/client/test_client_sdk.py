"""The SDK answers with the API's own models: the real app in process, the real `Client`."""

from __future__ import annotations

import pytest
from api.harness import Api

from trainyard.client import AuthError, TrainyardError
from trainyard.core.states import JobState
from trainyard.schemas.admin import VcView
from trainyard.schemas.cluster import NodeView
from trainyard.schemas.jobs import LOG_MAX_PAGE_BYTES, DryRunResult, JobDetail, JobPage, SubmitResult
from trainyard.schemas.users import TokenResponse, UserView

JOB = ("name: two\nsecrets: {key: hunter2}\n"
       "taskRoles:\n  m:\n    instances: 2\n    commands: ['echo <% $secrets.key %>']\n")


@pytest.mark.postgres
def test_every_answer_is_a_typed_model(api: Api) -> None:
    admin = api.sdk(api.admin_token)
    submitted = admin.submit(JOB)
    assert isinstance(submitted, SubmitResult) and submitted.state == JobState.WAITING
    dry = admin.submit(JOB, dry_run=True)
    assert isinstance(dry, DryRunResult) and dry.valid and "hunter2" not in str(dry.job)

    job = admin.job(submitted.id)
    assert isinstance(job, JobDetail) and job.state is JobState.WAITING and job.attempts == []
    page = admin.jobs()
    assert isinstance(page, JobPage) and [j.id for j in page.items] == [submitted.id] and page.next is None

    nodes = admin.nodes()
    assert all(isinstance(n, NodeView) for n in nodes) and len(nodes[0].gpus) == 4
    vcs = admin.vcs()
    assert all(isinstance(v, VcView) for v in vcs) and [v.name for v in vcs] == ["default"]
    me = admin.me()
    assert isinstance(me, UserView) and (me.name, me.admin) == ("admin", True)
    token = admin.create_token(user="alice")
    assert isinstance(token, TokenResponse) and token.user == "alice"
    assert admin.stop(submitted.id).state is JobState.STOPPED


def test_a_log_read_says_which_task_the_server_showed(api: Api) -> None:
    admin = api.sdk(api.admin_token)
    job = admin.submit(JOB)
    log = admin.read_log(job.id)  # nothing placed (no controller runs here): empty, no task named yet
    assert (log.data, log.offset, log.size, log.task, log.attempt) == (b"", 0, 0, None, None)
    assert admin.logs(job.id, limit_bytes=LOG_MAX_PAGE_BYTES * 3) == b""  # pages asked for stay within the most


def test_a_page_larger_than_the_server_holds_is_refused_naming_the_parameter(api: Api) -> None:
    admin = api.sdk(api.admin_token)
    job = admin.submit(JOB)
    with pytest.raises(TrainyardError) as refused:
        admin.read_log(job.id, limit=LOG_MAX_PAGE_BYTES + 1)
    assert refused.value.status == 422 and [e["path"] for e in refused.value.errors] == ["limit"]


def test_only_an_admin_issues_tokens_for_others_and_the_refusal_does_not_tell_who_exists(api: Api) -> None:
    alice = api.sdk(api.user_token)
    assert alice.create_token().user == "alice"
    for other in ("admin", "nobody-at-all"):
        with pytest.raises(AuthError) as refused:
            alice.create_token(user=other)
        assert refused.value.status == 403 and "only an admin" in refused.value.message


def test_a_model_dumps_back_to_exactly_what_the_server_sent(api: Api) -> None:
    """`yard ... --json` prints the SDK's models: they must neither lose nor change anything of the answer."""
    admin = api.sdk(api.admin_token)
    job = admin.submit(JOB)
    http = api.admin
    pairs = [
        (admin.job(job.id), http.get(f"/api/v1/jobs/{job.id}")),
        (admin.jobs(), http.get("/api/v1/jobs")),
        (admin.me(), http.get("/api/v1/me")),
    ]
    for model, raw in pairs:
        assert model.model_dump(mode="json") == raw.json()
    assert [n.model_dump(mode="json") for n in admin.nodes()] == http.get("/api/v1/nodes").json()
    assert [v.model_dump(mode="json") for v in admin.vcs()] == http.get("/api/v1/vcs").json()
