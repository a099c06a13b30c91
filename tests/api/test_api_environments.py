"""Environments (``yard env``, HAI's haienv) for real: built by a job of their owner's on the
harness's local backend from a small wheel made here (``--no-index --find-links``: no index
is needed), then a job that runs in one imports from it with the environment's python; who
may choose an environment; a failing build; deleting one in use."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from api.harness import Api
from api.live_harness import live_api
from api.wheels import local_requirements, tiny_wheel
from deadlines import scaled

from trainyard.client import Client, TrainyardError
from trainyard.controller.loop import Controller
from trainyard.core.states import JobState
from trainyard.services import admin
from trainyard.services.auth import create_token, create_user
from trainyard.store.rows import EnvironmentRow, JobRow

BUILD_TIMEOUT = 180.0  # a venv and a pip install, on a busy two-core machine


def add_user(api: Api, name: str, *, group: str | None = None) -> str:
    with api.ctx.db.session() as session:
        user = create_user(session, name, is_admin=False, clock=api.ctx.clock)
        token = create_token(session, user, by=user, clock=api.ctx.clock)
        if group is not None:
            admin.create_group(session, group, clock=api.ctx.clock)
            admin.add_member(session, group, name)
    return token


def run_until(api: Api, controller: Controller, ended: object, what: str, timeout: float = BUILD_TIMEOUT) -> None:
    """Run controller cycles until ``ended()`` (a callable) is true; the tasks are real
    processes, whose ends the controller can only observe."""
    assert callable(ended)
    deadline = time.monotonic() + scaled(timeout)
    while not ended():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen in {timeout:g} s")
        controller.wake()
        controller.run_once()
        time.sleep(0.05)


def env_state(api: Api, name: str) -> str:
    with api.ctx.db.session() as session:
        row = session.query(EnvironmentRow).filter_by(name=name).one()
        return row.state


def job_state(api: Api, job_id: int) -> str:
    with api.ctx.db.session() as session:
        job = session.get(JobRow, job_id)
        assert job is not None
        return job.state


def job_in(name: str, env: str, *commands: str) -> str:
    lines = "".join(f"      - {json.dumps(command)}\n" for command in commands)
    return f"name: {name}\nenvironment: {env}\ntaskRoles:\n  main:\n    commands:\n{lines}"


def submit(sdk: Client, text: str) -> int:
    return sdk.submit(text.encode(), content_type="application/yaml").id


def finished_job(api: Api, controller: Controller, sdk: Client, text: str) -> tuple[str, str]:
    job_id = submit(sdk, text)
    run_until(api, controller, lambda: JobState(job_state(api, job_id)).is_final, f"job {job_id} ending")
    return job_state(api, job_id), sdk.logs(job_id).decode()


def test_a_job_runs_in_an_environment_built_from_a_local_wheel_by_its_owners_job(db, tmp_path) -> None:
    wheels = tmp_path / "wheels"
    tiny_wheel(wheels, "tinypkg", 'GREETING = "hello from tinypkg"\n')
    with live_api(db, tmp_path) as (api, controller), api.sdk(api.user_token) as alice:
        env = alice.create_environment("tiny", requirements=local_requirements(wheels, "tinypkg==0.1"))
        assert (env.state, env.owner, env.visibility, env.kind) == ("BUILDING", "alice", "private", "custom")
        assert env.path == str(api.ctx.backend.environments_root / "alice" / "tiny")  # type: ignore[attr-defined]
        build = alice.job(env.buildJobId or 0)
        assert build.user == "alice" and "env-build" in build.spec["tags"]  # an ordinary job of hers, tagged

        run_until(api, controller, lambda: env_state(api, "tiny") != "BUILDING", "the build")
        built = alice.environment("tiny")
        assert built.state == "READY", (built.message, alice.logs(env.buildJobId or 0).decode())
        assert "Successfully installed tinypkg-0.1" in alice.logs(env.buildJobId or 0).decode()

        state, out = finished_job(api, controller, alice, job_in(
            "uses-tiny", "tiny",
            'python -c "import tinypkg, sys; print(tinypkg.GREETING, sys.prefix)"',
            'echo "python=$(command -v python) venv=$VIRTUAL_ENV path=$PATH"',
        ))
    assert state == JobState.SUCCEEDED, out
    assert f"hello from tinypkg {env.path}" in out
    assert f"python={env.path}/bin/python venv={env.path} path={env.path}/bin:/usr/local/sbin" in out


def test_a_custom_environment_on_a_base_one_sees_both_their_packages(db, tmp_path) -> None:
    wheels = tmp_path / "wheels"
    tiny_wheel(wheels, "basepkg", 'NAME = "base"\n')
    tiny_wheel(wheels, "toppkg", 'NAME = "top"\n')
    base = tmp_path / "opt" / "base-env"  # what an admin installed on every node
    subprocess.run(["/usr/bin/python3", "-m", "venv", str(base)], check=True)
    subprocess.run([str(base / "bin/python"), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheels),
                    "basepkg"], check=True)
    with live_api(db, tmp_path) as (api, controller), api.sdk(api.admin_token) as root, \
            api.sdk(api.user_token) as alice:
        declared = root.create_environment("py-base", base_path=str(base))
        assert (declared.state, declared.kind, declared.visibility) == ("READY", "base", "everyone")
        env = alice.create_environment("on-base", base="py-base", requirements=local_requirements(wheels, "toppkg"))
        run_until(api, controller, lambda: env_state(api, "on-base") != "BUILDING", "the build")
        assert alice.environment("on-base").state == "READY", alice.logs(env.buildJobId or 0).decode()
        assert alice.environment("on-base").base == "py-base"
        state, out = finished_job(api, controller, alice, job_in(
            "uses-both", "on-base",
            'python -c "import basepkg, toppkg; print(basepkg.NAME + \'+\' + toppkg.NAME)"',
            'echo "python=$(command -v python)"',
        ))
    assert state == JobState.SUCCEEDED, out
    assert "base+top" in out and f"python={env.path}/bin/python" in out


def test_a_failing_build_leaves_the_environment_failed_with_its_log_and_unusable(db, tmp_path) -> None:
    with live_api(db, tmp_path) as (api, controller), api.sdk(api.user_token) as alice:
        env = alice.create_environment("broken", requirements=local_requirements(tmp_path, "no-such-package-here"))
        run_until(api, controller, lambda: env_state(api, "broken") != "BUILDING", "the build")
        failed = alice.environment("broken")
        assert failed.state == "FAILED" and f"build job {env.buildJobId} failed" in failed.message
        log = alice.logs(env.buildJobId or 0).decode()
        assert "No matching distribution found for no-such-package-here" in log
        refused = api.user.post("/api/v1/jobs", content=job_in("in-broken", "broken", "true"),
                                headers={"Content-Type": "application/yaml"})
    assert refused.status_code == 409, refused.text
    assert refused.json()["errors"][0]["path"] == "environment"
    assert f"yard logs {env.buildJobId}" in refused.json()["detail"]


def test_only_its_owner_and_the_group_it_is_shared_with_may_run_in_an_environment(db, api, tmp_path) -> None:
    bob_token = add_user(api, "bob", group="vision")
    with api.sdk(api.user_token) as alice, api.sdk(bob_token) as bob, api.sdk(api.admin_token) as root:
        alice.create_environment("mine", requirements="numpy\n")  # private; never built here (no controller)
        root.create_environment("vision-base", base_path="/opt/conda/envs/vision", group="vision")
        assert [e.name for e in bob.environments()] == ["vision-base"]
        assert [e.name for e in alice.environments()] == ["mine"]
        with pytest.raises(TrainyardError) as hidden:
            bob.environment("mine")
        assert hidden.value.status == 404
    refused = api.client(bob_token).post("/api/v1/jobs", content=job_in("bobs", "mine", "true"),
                                         headers={"Content-Type": "application/yaml"})
    assert refused.status_code == 404, refused.text  # as `bob.environment("mine")`: not bob's to learn of
    assert refused.json()["errors"] == [{"path": "environment", "message": "unknown environment"}]
    assert "alice" not in refused.text
    role_level = "name: alices\ntaskRoles:\n  main:\n    environment: vision-base\n    commands: ['true']\n"
    refused = api.user.post("/api/v1/jobs", content=role_level, headers={"Content-Type": "application/yaml"})
    assert refused.status_code == 404 and refused.json()["errors"][0]["path"] == "taskRoles.main.environment"
    accepted = api.client(bob_token).post("/api/v1/jobs", content=job_in("bobs", "vision-base", "true"),
                                          headers={"Content-Type": "application/yaml"})
    assert accepted.status_code == 201, accepted.text
    unknown = api.user.post("/api/v1/jobs", content=job_in("x", "nowhere", "true"),
                            headers={"Content-Type": "application/yaml"})
    assert unknown.status_code == 404 and unknown.json()["errors"][0]["path"] == "environment"


def test_sharing_is_checked_and_base_environments_are_for_admins(db, api) -> None:
    add_user(api, "bob", group="vision")
    refused = api.user.post("/api/v1/environments", json={"name": "x", "requirements": "numpy", "group": "vision"})
    assert refused.status_code == 403 and refused.json()["errors"][0]["path"] == "group"  # alice is no member
    refused = api.user.post("/api/v1/environments", json={"name": "x", "basePath": "/opt/x"})
    assert refused.status_code == 403
    refused = api.user.post("/api/v1/environments", json={"name": "Bad Name", "requirements": "numpy"})
    assert refused.status_code == 422 and refused.json()["errors"][0]["path"] == "name"
    refused = api.user.post("/api/v1/environments", json={"name": "x"})
    assert refused.status_code == 422 and refused.json()["errors"][0]["path"] == "requirements"
    refused = api.admin.post("/api/v1/environments", json={"name": "x", "basePath": "relative/path"})
    assert refused.status_code == 422 and refused.json()["errors"][0]["path"] == "basePath"
    assert api.user.post("/api/v1/environments", json={"name": "x", "requirements": "numpy"}).status_code == 201
    on_custom = api.user.post("/api/v1/environments", json={"name": "y", "requirements": "numpy", "base": "x"})
    assert on_custom.status_code == 409 and on_custom.json()["errors"][0]["path"] == "base"  # x is still BUILDING
    api.admin.post("/api/v1/environments", json={"name": "img", "image": "debian:12"})
    on_image = api.user.post("/api/v1/environments", json={"name": "y", "requirements": "numpy", "base": "img"})
    assert on_image.status_code == 422 and "is an image" in on_image.json()["detail"]
    taken = api.admin.post("/api/v1/environments", json={"name": "x", "basePath": "/opt/x"})
    assert taken.status_code == 409 and taken.json()["errors"][0]["path"] == "name"


def test_an_environment_in_use_is_deleted_only_by_force_and_its_jobs_then_fail_to_launch(db, tmp_path) -> None:
    with live_api(db, tmp_path) as (api, controller), api.sdk(api.user_token) as alice, \
            api.sdk(api.admin_token) as root:
        env = alice.create_environment("doomed", requirements="numpy\n")
        with pytest.raises(TrainyardError) as building:
            alice.delete_environment("doomed")
        assert building.value.status == 409 and f"job {env.buildJobId} is building it" in building.value.message
        removed = alice.delete_environment("doomed", force=True)  # stops its build, still waiting
        assert removed.stoppedJobs == [env.buildJobId] and job_state(api, env.buildJobId or 0) == JobState.STOPPED

        root.create_environment("shared-base", base_path="/opt/shared")
        waiting = submit(alice, job_in("needs-base", "shared-base", "true"))
        with pytest.raises(TrainyardError) as in_use:
            root.delete_environment("shared-base")
        assert in_use.value.status == 409 and f"job {waiting} uses it" in in_use.value.message
        with pytest.raises(TrainyardError) as not_hers:
            alice.delete_environment("shared-base", force=True)
        assert not_hers.value.status == 403
        root.delete_environment("shared-base", force=True)
        run_until(api, controller, lambda: JobState(job_state(api, waiting)).is_final, "the job's end")
        job = alice.job(waiting)
    assert job.state == JobState.FAILED
    assert "environment 'shared-base' no longer exists" in str(job.model_dump())


def test_deleting_a_user_deletes_their_environments_and_then_their_folders(db, api) -> None:
    with api.sdk(api.user_token) as alice, api.sdk(api.admin_token) as root:
        env = alice.create_environment("hers", requirements="numpy\n")  # its build waits: no controller here
        assert env.path is not None
        own = api.ctx.backend.environments_root / "alice"  # type: ignore[attr-defined]
        assert env.path == str(own / "hers")
        (own / "hers" / "bin").mkdir(parents=True)  # as a build leaves it
        (own / "hers" / "bin" / "python").write_text("")

        removed = root.delete_user("alice", force=True)

        assert removed.stoppedJobs == [env.buildJobId]
        assert [e.name for e in root.environments()] == []
        assert not own.exists()  # moved aside at once, removed in the background (gigabytes take time)
        from e2e.server import wait_until

        wait_until(lambda: not list(own.parent.glob(".deleting-*")), timeout=30, what="the folder to be removed")
