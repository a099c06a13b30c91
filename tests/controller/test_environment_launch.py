"""What a task is launched with when its job names environments: the role's own over the
job's; a Python environment's prefix and bin folders (its own, then its base's); an image
environment's image; and a deleted one fails the launch, saying so."""

from __future__ import annotations

import pytest

from trainyard.backends.base import PythonEnvironment
from trainyard.controller.launching import EnvironmentGone, build_launch, environments_of
from trainyard.controller.loop import Controller
from trainyard.controller.reconcile import current_attempt
from trainyard.services import environments
from trainyard.services import jobs as job_service
from trainyard.spec.loading import parse_job
from trainyard.store.rows import EnvironmentRow, JobRow

JOB = """
name: three-ways
environment: on-base
taskRoles:
  trainer: {commands: [train]}
  server: {environment: serving-image, commands: [serve]}
"""


@pytest.fixture
def placed(make_world):
    """A placed job whose trainer runs in a custom environment on a base, its server in an image."""
    world = make_world(gpus=2, users=("root", "alice"), admins=("root",))  # the inventory, for the submit's fit check
    clock = world.clock
    with world.db.session() as s:
        admin, alice = s.merge(world.root), s.merge(world.alice)
        base = environments.create_base(s, admin, "py-base", path="/opt/py/", image=None, group=None, clock=clock)
        environments.create_base(s, admin, "serving-image", path=None, image="serving:1", group=None, clock=clock)
        s.add(EnvironmentRow(name="on-base", owner_id=alice.id, kind="custom", visibility="private", base_id=base.id,
                             path="/envs/alice/on-base", requirements="numpy\n", state="READY", message="",
                             created_at=clock.now()))
        s.flush()
        job_id = job_service.submit_job(s, alice, parse_job(JOB), clock=clock).id
    world.controller._schedule()  # placed, not launched
    return world.db, world.controller, job_id


def launches(db, controller: Controller, job_id: int):
    with db.session() as s:
        job = s.get(JobRow, job_id)
        attempt = current_attempt(job)
        spec = controller.spec_of(job)
        named = environments_of(s, spec)
        return {t.role: build_launch(job, attempt, t, spec, {}, environments=named) for t in attempt.tasks}


def test_each_role_runs_in_its_environment_its_own_bin_first_then_its_bases(placed) -> None:
    db, controller, job_id = placed
    by_role = launches(db, controller, job_id)
    assert by_role["trainer"].environment == PythonEnvironment("/envs/alice/on-base",
                                                               ("/envs/alice/on-base/bin", "/opt/py/bin"))
    assert by_role["trainer"].image is None
    # The image environment's short name, qualified as Docker reads it.
    assert by_role["server"].environment is None and by_role["server"].image == "docker.io/library/serving:1"


def test_a_task_whose_environment_was_deleted_fails_to_launch_saying_so(placed) -> None:
    db, controller, job_id = placed
    with db.session() as s:
        s.delete(s.query(EnvironmentRow).filter_by(name="serving-image").one())
    with pytest.raises(EnvironmentGone, match="environment 'serving-image' no longer exists"):
        launches(db, controller, job_id)
    controller.reconciler.run()
    with db.session() as s:
        job = s.get(JobRow, job_id)
        messages = {t.role: t.message for t in current_attempt(job).tasks}
    assert "environment 'serving-image' no longer exists" in messages["server"]
