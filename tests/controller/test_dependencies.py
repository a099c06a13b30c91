"""Dependencies between jobs (the job file's ``dependencies``, as Slurm's ``--dependency``)
under the controller, with the real local backend and store: a job waits, out of the
scheduler's sight and with a DEPENDENCY reason, until the jobs it names have ended as its
conditions ask; one whose dependency can never be met is failed at once, down a whole chain;
what a submit refuses, with the field path."""

from __future__ import annotations

import pytest
from worlds import World

from trainyard.core.clock import SystemClock
from trainyard.services import jobs as job_service
from trainyard.services.errors import Invalid
from trainyard.services.specs import StoredSpecs
from trainyard.spec.loading import parse_job

CLOCK = SystemClock()


@pytest.fixture
def world(make_world) -> World:
    return make_world(gpus=2, users=("alice", "bob", "root"), admins=("root",))


def job(name: str, command: str = "true", dependencies: str = "") -> str:
    after = f"\ndependencies: {dependencies}" if dependencies else ""
    return f"""
name: {name}{after}
taskRoles:
  m:
    resourcePerInstance: {{gpu: 0}}
    commands: [{command!r}]
"""


def test_a_job_waits_for_another_to_succeed_out_of_the_schedulers_sight_then_runs(world, tmp_path):
    go = tmp_path / "go"
    first = world.submit(job("prep", f"while [ ! -e {go} ]; do sleep 0.05; done"))
    second = world.submit(job("train", dependencies=f"{{afterok: [{first}]}}"))
    world.drive(first, ("RUNNING",))
    waiting = world.drive(second, ("WAITING",), until=lambda j: j.pending_reason == "DEPENDENCY")
    assert waiting.pending_message == f"waits for job {first} to succeed"
    assert waiting.pending_short == f"after {first}"
    assert not world.tasks(second)  # never placed: the scheduler did not see it
    with world.db.session() as s:
        detail = job_service.describe_job(s, s.merge(world.alice), second, specs=StoredSpecs(), backend="local",
                                          now=CLOCK.now())
    assert [(d.condition, d.job, d.state, d.status) for d in detail.dependencies] == [
        ("afterok", first, "RUNNING", "waiting")]
    assert detail.pending is not None and detail.pending.reason == "DEPENDENCY"

    go.touch()
    done = world.drive(first, ("SUCCEEDED",))
    ran = world.drive(second, ("SUCCEEDED",))
    assert ran.started_at is not None and done.finished_at is not None and ran.started_at >= done.finished_at


def test_a_dependency_that_can_never_be_met_ends_the_waiting_job_and_its_chain_in_one_cycle(world):
    first = world.submit(job("prep"))
    chain = world.submit(job("train", dependencies=f"{{afterok: [{first}]}}"))
    after_chain = world.submit(job("eval", dependencies=f"afterok:{chain}"))
    on_failure = world.submit(job("cleanup", dependencies=f"{{afternotok: [{chain}]}}"))
    anyway = world.submit(job("report", dependencies=f"{{afterany: [{first}], afterok: []}}"))
    world.stop(first)  # STOPPED before it started: "train" can never see it succeed

    world.cycle()
    failed = world.job(chain)
    assert failed.state == "FAILED"
    assert failed.state_message == (f"cannot start: its dependency can never be met: job {first} STOPPED, "
                                    "and this job waited for it to succeed")
    assert world.job(after_chain).state == "FAILED"
    assert f"job {chain} FAILED" in world.job(after_chain).state_message
    assert world.events(after_chain)[-1][0] == "failed"
    for met in (on_failure, anyway):  # a failed "train" is what cleanup waited for; report waited for any end
        world.drive(met, ("SUCCEEDED",))


def refusal(world, user, text: str) -> Invalid:
    with world.db.session() as s, pytest.raises(Invalid) as caught:
        job_service.submit_job(s, s.merge(user), parse_job(text), clock=CLOCK)
    return caught.value


def test_a_submit_refuses_unknown_other_users_and_already_impossible_dependencies(world):
    alices = world.submit(job("mine"))
    bobs = world.submit(job("theirs"), world.bob)
    world.stop(alices)

    unknown = refusal(world, world.alice, job("x", dependencies="{afterok: [999]}"))
    others = refusal(world, world.alice, job("x", dependencies=f"{{afterany: [{bobs}]}}"))
    assert unknown.details == [{"path": "dependencies.afterok[0]",
                                "message": "no job 999: a job may only wait for jobs that exist (see `yard jobs`) "
                                           "and are yours"}]
    # Another user's job reads exactly as one that does not exist.
    assert others.details[0]["message"] == unknown.details[0]["message"].replace("999", str(bobs))
    assert others.details[0]["path"] == "dependencies.afterany[0]"

    impossible = refusal(world, world.alice, job("x", dependencies=f"afterany:{bobs},afterok:{alices}"))
    assert impossible.details[0]["path"] == "dependencies.afterok[0]"
    assert f"job {alices} already STOPPED, so afterok" in impossible.message
    assert "can never be met" in impossible.message

    # An admin may wait for anyone's job; a job ended as the condition wants is simply met.
    admins = world.submit(job("follow", dependencies=f"{{afterany: [{bobs}], afternotok: [{alices}]}}"),
                          world.root)
    world.drive(admins, ("SUCCEEDED",))


def test_a_clone_keeps_the_dependencies_and_is_refused_once_they_can_never_be_met(world):
    first = world.submit(job("prep", "false"))
    second = world.submit(job("train", dependencies=f"{{afterok: [{first}]}}"))
    with world.db.session() as s:
        spec = job_service.check_clone(s, s.merge(world.alice), second, job_service.CloneChanges(),
                                       specs=StoredSpecs())
    assert spec.dependencies is not None and spec.dependencies.afterok == [first]
    world.drive(first, ("FAILED",))
    world.drive(second, ("FAILED",))
    with world.db.session() as s, pytest.raises(Invalid, match=f"job {first} already FAILED"):
        job_service.clone_job(s, s.merge(world.alice), second, job_service.CloneChanges(), specs=StoredSpecs(),
                              clock=CLOCK)
