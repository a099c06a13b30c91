"""The SDK's sweep calls against the real app in process: submit (a dict or a file), list
page after page, show, stop, clone, wait; another user's sweep answers as not found; a clone
keeps the sweep's secrets on the server."""

from __future__ import annotations

from pathlib import Path

import pytest
from api.harness import Api

from trainyard.client import TrainyardError, WaitTimeout
from trainyard.store.rows import JobRow

SWEEP = {
    "name": "sdk", "secrets": {"key": "hunter2"},
    "taskRoles": {"m": {"commands": ["login <% $secrets.key %> <% $parameters.seed %>"]}},
    "sweep": {"grid": {"seed": [1, 2, 3]}, "metric": {"name": "loss"}},
}


def test_submit_list_show_wait_stop_and_clone(api: Api, tmp_path: Path) -> None:
    sdk = api.sdk(api.user_token)
    made = sdk.submit_sweep(SWEEP)
    assert made.size == 3 and made.metric == {"name": "loss"} and [m.params for m in made.members] == [
        {"seed": 1}, {"seed": 2}, {"seed": 3}]
    job_file = tmp_path / "sweep.yaml"
    job_file.write_text("name: f\ntaskRoles:\n  m:\n    commands: ['true']\nsweep:\n  list: [{a: 1}]\n")
    second = sdk.submit_sweep(str(job_file))
    assert [s.id for s in sdk.sweeps()] == [second.id, made.id]
    assert [s.id for s in sdk.sweeps(limit=1)] == [second.id]
    with pytest.raises(WaitTimeout):
        sdk.wait_sweep(made.id, timeout=0, poll=0)
    assert sorted(sdk.stop_sweep(made.id).stopped) == [m.jobId for m in made.members]
    seen = []
    ended = sdk.wait_sweep(made.id, poll=0, on_change=seen.append)
    assert ended.ended and {m.state for m in ended.members} == {"STOPPED"} and len(seen) == 1
    clone = sdk.clone_sweep(made.id)
    assert clone.id not in (made.id, second.id) and clone.size == 3
    with api.ctx.db.session() as session:  # the secret went with it, never through the client
        job = session.get(JobRow, clone.members[0].jobId)
        assert job is not None and job.spec["secrets"] == {"key": "hunter2"}
    admins = api.sdk(api.admin_token)
    assert {s.user for s in admins.sweeps()} == {"alice"}
    theirs = admins.submit_sweep(SWEEP)
    with pytest.raises(TrainyardError) as refused:
        sdk.sweep(theirs.id)
    assert refused.value.status == 404
