"""What the controller shows the scheduler: VCs, quotas, running work, run-time limits."""

from __future__ import annotations

import pytest

from trainyard.backends.base import GpuInfo, NodeInventory
from trainyard.controller.inventory import sync_inventory
from trainyard.controller.limits import end_overdue_attempts
from trainyard.controller.scheduling import PortPlan, apply_decisions
from trainyard.controller.world import (
    running_jobs,
    user_groups,
    user_quotas,
    virtual_clusters,
)
from trainyard.core.clock import FakeClock
from trainyard.scheduler.snapshot import Decisions, GpuShare, StartJob, TaskPlacement
from trainyard.services import admin, auth
from trainyard.services import jobs as job_service
from trainyard.services.errors import Invalid
from trainyard.services.node_view import node_states
from trainyard.spec.loading import parse_job
from trainyard.store.rows import AttemptRow, JobRow

# The store answers these: they run on PostgreSQL too (tests/conftest.py).
pytestmark = pytest.mark.postgres


def inventory(session, clock, **models: int) -> None:
    """One node per model with that many GPUs, two GPU groups each, in rack r1."""
    nodes = [
        NodeInventory(
            name=f"n-{model}", address="127.0.0.1", cpu_milli=64000, memory_mb=512000,
            gpus=tuple(GpuInfo(i, model, 40000, group=f"numa{i * 2 // count}") for i in range(count)),
            labels={"rack": "r1"},
        )
        for model, count in models.items()
    ]
    sync_inventory(session, "local", nodes, clock)


def test_default_gets_what_no_vc_guarantees_and_any_model_means_the_only_model(db) -> None:
    clock = FakeClock()
    with db.session() as s:
        inventory(s, clock, A100=8)
        admin.create_vc(s, "vision", gpus=3, model=None, preemption=True, clock=clock)
        admin.create_vc(s, "speech", gpus=2, model="A100", preemption=False, clock=clock)
    with db.session() as s:
        nodes = node_states(s, in_use=True)
        vcs = {vc.name: vc for vc in virtual_clusters(s)}
    assert vcs["vision"].quota == {"A100": 3}
    assert vcs["speech"].quota == {"A100": 2} and not vcs["speech"].allow_priority_preemption
    assert vcs["default"].quota == {"A100": 3}
    assert nodes[0].labels == {"rack": "r1"}
    assert [g.group for g in nodes[0].gpus] == ["numa0"] * 4 + ["numa1"] * 4


def test_without_vcs_the_scheduler_sees_none(db) -> None:
    with db.session() as s:
        inventory(s, FakeClock(), A100=8)
        assert virtual_clusters(s) == ()


def test_on_several_models_a_quota_must_name_its_model(db) -> None:
    clock = FakeClock()
    with db.session() as s:
        inventory(s, clock, A100=8, V100=8)
        with pytest.raises(Invalid, match="several GPU models .A100, V100.: give the quota per model"):
            admin.create_vc(s, "vision", gpus=4, model=None, preemption=True, clock=clock)


def test_user_quotas_are_keyed_by_priority_rank(db) -> None:
    clock = FakeClock()
    with db.session() as s:
        auth.create_user(s, "alice", is_admin=False, clock=clock)
        admin.set_user_quota(s, "alice", priority="prod", gpus=2.5)
        admin.set_user_quota(s, "alice", priority="low", gpus=8)
    with db.session() as s:
        assert user_quotas(s) == {("alice", 0): 2500, ("alice", 2): 8000}


def start(db, clock, text: str, gpu: int = 0) -> int:
    """Submit a job as alice and place it on n-A100 GPU ``gpu``, as the controller would."""
    with db.session() as s:
        names = {u.name for u in auth.list_users(s)}
        if "alice" in names:
            user = auth.get_user(s, "alice")
        else:
            user = auth.create_user(s, "alice", is_admin=False, clock=clock)
        job_id = job_service.submit_job(s, user, parse_job(text), clock=clock).id
    placement = TaskPlacement("w", 0, "n-A100", (GpuShare(gpu, 1000),), 1000, 1024)
    with db.session() as s:
        apply_decisions(s, Decisions(starts=(StartJob(job_id, (placement,)),)), {}, {job_id: PortPlan(0, {})}, clock)
    return job_id


def test_running_work_carries_its_expected_end_and_overdue_attempts_time_out(db) -> None:
    clock = FakeClock()
    with db.session() as s:
        inventory(s, clock, A100=8)
    job_id = start(db, clock, "name: a\nmaxRunTimeSeconds: 60\ntaskRoles:\n  w:\n    resourcePerInstance: {gpu: 1}\n"
                   "    commands: [sleep 600]\n")
    with db.session() as s:
        running, ending = running_jobs(s)
    assert [(r.job_id, r.expected_end - r.started_at) for r in running] == [(job_id, 60.0)]
    assert ending == frozenset()

    clock.advance(59)
    with db.session() as s:
        assert end_overdue_attempts(s, clock) == []
    clock.advance(1)
    with db.session() as s:
        assert end_overdue_attempts(s, clock) == [job_id]
    with db.session() as s:
        attempt = s.query(AttemptRow).filter_by(job_id=job_id).one()
        assert attempt.state == "TIMED_OUT"
        assert attempt.reason == "ran past its maximum run time (maxRunTimeSeconds: 60)"
        assert s.get(JobRow, job_id).state == "RUNNING"  # until reconcile has stopped its tasks
        running, ending = running_jobs(s)
        assert ending == frozenset({job_id})  # the scheduler counts its GPUs as soon free
        grace = s.get(JobRow, job_id).grace_seconds
        assert running[0].stops_by == running[0].started_at + 60 + grace  # when its grace period ends
    with db.session() as s:
        assert end_overdue_attempts(s, clock) == []  # once only


def test_a_preempted_or_stopped_job_shows_when_its_grace_period_ends(db) -> None:
    from trainyard.controller.scheduling import preempt_jobs
    from trainyard.scheduler.snapshot import Preempt
    from trainyard.services.specs import StoredSpecs

    clock = FakeClock()
    with db.session() as s:
        inventory(s, clock, A100=8)
    spec = "name: a\nstopGracePeriodSeconds: 20\ntaskRoles:\n  w:\n    resourcePerInstance: {gpu: 1}\n" \
           "    commands: [sleep 600]\n"
    victim, stopped = start(db, clock, spec), start(db, clock, spec, gpu=1)
    clock.advance(5)
    with db.session() as s:
        assert running_jobs(s)[0][0].stops_by is None
        assert preempt_jobs(s, [Preempt(victim, 0, "for job 9", 0)], clock, StoredSpecs().of) == [victim]
        job_service.request_stop(s, auth.get_user(s, "alice"), stopped, clock=clock)
    clock.advance(7)
    with db.session() as s:
        running, ending = running_jobs(s)
    now_then = clock.now().timestamp() - 7
    assert ending == {victim, stopped}
    assert {r.job_id: r.stops_by for r in running} == {victim: now_then + 20, stopped: now_then + 20}


def test_each_vcs_gpu_sharing_rule_and_each_users_groups_reach_the_scheduler(db) -> None:
    clock = FakeClock()
    with db.session() as s:
        inventory(s, clock, A100=8)
        for user in ("alice", "bob", "carol"):
            auth.create_user(s, user, is_admin=False, clock=clock)
        admin.create_vc(s, "vision", gpus=2, model=None, preemption=True, clock=clock)
        admin.create_vc(s, "speech", gpus=2, model=None, preemption=True, clock=clock, gpu_sharing="same-group")
        admin.set_vc_sharing(s, "vision", "anyone")
        admin.create_group(s, "ml", clock=clock)
        admin.add_member(s, "ml", "alice")
        admin.add_member(s, "ml", "bob")
    with db.session() as s:
        rules = {vc.name: vc.gpu_sharing for vc in virtual_clusters(s)}
        groups = user_groups(s)
    assert rules == {"default": "same-user", "vision": "anyone", "speech": "same-group"}
    assert groups["alice"] == groups["bob"] and len(groups["alice"]) == 1 and "carol" not in groups


def test_an_unknown_sharing_rule_is_refused_naming_the_field(db) -> None:
    with db.session() as s:
        inventory(s, FakeClock(), A100=8)
        with pytest.raises(Invalid) as refused:
            admin.create_vc(s, "vision", gpus=2, model=None, preemption=True, clock=FakeClock(), gpu_sharing="all")
    assert "use one of same-user, same-group, anyone" in str(refused.value)
    assert refused.value.details == [{"path": "gpuSharing", "message": "unknown GPU sharing rule"}]


def test_the_controller_and_a_submit_see_the_same_nodes_but_only_the_controller_sees_what_is_held(db) -> None:
    """One node view (``services.node_view``) for the scheduler's cycle and a submit's checks."""
    clock = FakeClock()
    with db.session() as s:
        inventory(s, clock, A100=8, V100=2)
        admin.change_labels(s, "n-A100", {"ib": "true"})
        admin.set_cordon(s, "n-V100", True)
    start(db, clock, "name: a\ntaskRoles:\n  w:\n    resourcePerInstance: {gpu: 1}\n    commands: [sleep 600]\n",
          gpu=3)
    with db.session() as s:
        held, empty = node_states(s, in_use=True), node_states(s, in_use=False)
    assert [n.name for n in held] == [n.name for n in empty] == ["n-A100", "n-V100"]
    assert [(n.schedulable, dict(n.labels)) for n in held] == [(n.schedulable, dict(n.labels)) for n in empty] == [
        (True, {"rack": "r1", "ib": "true"}), (False, {"rack": "r1"})]
    assert [g.used_milli for g in held[0].gpus] == [0, 0, 0, 1000, 0, 0, 0, 0]
    assert (held[0].cpu_used_milli, held[0].memory_used_mb) == (1000, 1024)
    assert all(g.used_milli == 0 for n in empty for g in n.gpus)
    assert (empty[0].cpu_used_milli, empty[0].memory_used_mb) == (0, 0)
    assert [g.group for g in held[0].gpus] == [g.group for g in empty[0].gpus] == ["numa0"] * 4 + ["numa1"] * 4
