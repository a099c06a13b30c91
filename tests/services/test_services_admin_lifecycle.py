"""Taking things away on a real store (SQLite, and PostgreSQL when configured): tokens listed
and revoked, users disabled and deleted, VCs deleted, grants and memberships removed, each
refused while it would orphan a waiting or running job unless forced."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from deadlines import scaled
from sqlalchemy import select

from trainyard.backends.local.backend import LocalBackend
from trainyard.backends.local.gpus import simulated_gpus
from trainyard.controller.inventory import sync_inventory
from trainyard.controller.loop import Controller
from trainyard.controller.scheduling import PortPlan, apply_decisions
from trainyard.core.clock import FakeClock
from trainyard.scheduler.snapshot import Decisions, GpuShare, StartJob, TaskPlacement
from trainyard.services import admin, auth, removal
from trainyard.services import jobs as job_service
from trainyard.services.auth import TOKEN_CACHE_SECONDS, TokenCache
from trainyard.services.errors import Conflict, Forbidden, NotFound
from trainyard.spec.loading import parse_job
from trainyard.store.db import Database
from trainyard.store.rows import JobEventRow, JobRow, MembershipRow, TokenRow, UserQuotaRow, UserRow, VcGrantRow

NODE = "n1"


def job_file(vc: str = "default", command: str = "sleep 600") -> str:
    return (
        f"name: j\ndefaults: {{virtualCluster: {vc}}}\ntaskRoles:\n  m:\n"
        f"    resourcePerInstance: {{gpu: 1}}\n    commands: ['{command}']\n"
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def backend(tmp_path) -> LocalBackend:
    return LocalBackend(tmp_path / "local", gpus=simulated_gpus(4), cpu_milli=8000, memory_mb=16384)


@pytest.fixture
def world(db: Database, clock: FakeClock, backend: LocalBackend) -> dict[str, UserRow]:
    """A 4-GPU node; the admin ``root``, alice and bob; VC vision (2 GPUs) granted to @cv, of
    which alice is a member, and to bob himself."""
    with db.session() as s:
        sync_inventory(s, backend.name, backend.inventory(), clock)
        users = {
            name: auth.create_user(s, name, is_admin=name == "root", clock=clock) for name in ("root", "alice", "bob")
        }
        admin.create_group(s, "cv", clock=clock)
        admin.add_member(s, "cv", "alice")
        admin.create_vc(s, "vision", gpus=2, model=None, preemption=True, clock=clock)
        admin.grant_vc(s, "vision", "@cv")
        admin.grant_vc(s, "vision", "bob")
    return users


def submit(db: Database, clock: FakeClock, user: UserRow, vc: str = "default") -> int:
    with db.session() as s:
        return job_service.submit_job(s, user, parse_job(job_file(vc)), clock=clock).id


def start(db: Database, clock: FakeClock, job_id: int, backend: LocalBackend, gpu: int = 0) -> None:
    """Place a waiting job on one GPU, as the controller's schedule phase would."""
    node = backend.inventory()[0].name
    placement = TaskPlacement("m", 0, node, (GpuShare(gpu, 1000),), 1000, 1024)
    with db.session() as s:
        apply_decisions(s, Decisions(starts=(StartJob(job_id, (placement,)),)), {}, {job_id: PortPlan(0, {})}, clock)


def states(db: Database, *job_ids: int) -> list[str]:
    with db.session() as s:
        return [s.get(JobRow, j).state for j in job_ids]


# -- tokens -------------------------------------------------------------------------------


def test_users_list_and_revoke_only_their_own_tokens_and_admins_anyones(db: Database, clock, world) -> None:
    with db.session() as s:
        root, alice, bob = world["root"], world["alice"], world["bob"]
        auth.create_token(s, root, by=root, name="root's", clock=clock)
        auth.create_token(s, alice, by=alice, name="laptop", clock=clock)
        auth.create_token(s, bob, by=bob, name="bob's", clock=clock)
    with db.session() as s:
        mine = auth.list_tokens(s, alice)
        assert [t.name for t in mine] == ["laptop"]
        assert [t.name for t in auth.list_tokens(s, alice, for_user="alice")] == ["laptop"]
        with pytest.raises(Forbidden):
            auth.list_tokens(s, alice, for_user="bob")
        with pytest.raises(Forbidden):  # refused before the name is looked up
            auth.list_tokens(s, alice, for_user="nobody")
        with pytest.raises(Forbidden):
            auth.list_tokens(s, alice, every_user=True)
        assert [t.user.name for t in auth.list_tokens(s, root, every_user=True)] == ["root", "alice", "bob"]
        assert [t.name for t in auth.list_tokens(s, root, for_user="bob")] == ["bob's"]
        with pytest.raises(NotFound, match="no user named 'nobody'"):
            auth.list_tokens(s, root, for_user="nobody")
        bobs = auth.list_tokens(s, bob)[0].id
        with pytest.raises(NotFound, match=f"no token {bobs}"):  # someone else's: as if it were not there
            auth.revoke_token(s, alice, bobs)
        assert auth.revoke_token(s, alice, mine[0].id).revoked
    with db.session() as s:
        assert auth.list_tokens(s, alice) == []
        with pytest.raises(NotFound):  # once only
            auth.revoke_token(s, alice, mine[0].id)
        assert auth.revoke_token(s, root, bobs).user.name == "bob"  # an admin revokes anyone's


def test_the_last_token_of_any_admin_cannot_be_revoked(db: Database, clock, world) -> None:
    with db.session() as s:
        root = world["root"]
        first = auth.create_token(s, root, by=root, clock=clock)
        first_id = s.scalar(select(TokenRow.id).where(TokenRow.token_hash == auth.hash_token(first)))
        with pytest.raises(Conflict, match="last token of any admin.*yard token create"):
            auth.revoke_token(s, root, first_id)
        auth.create_token(s, root, by=root, clock=clock)
        auth.revoke_token(s, root, first_id)  # another one is left
        assert auth.authenticate(s, first) is None


def test_a_token_revoked_elsewhere_is_refused_within_the_cache_time_and_at_once_when_forgotten(
    db: Database, clock: FakeClock, world
) -> None:
    with db.session() as s:
        token = auth.create_token(s, world["alice"], by=world["alice"], clock=clock)
    cache = TokenCache(db, clock=clock)
    assert cache.user_for_token(token).name == "alice"
    with db.session() as s:
        row = s.scalar(select(TokenRow).where(TokenRow.token_hash == auth.hash_token(token)))
        assert row.last_used_at == clock.now()  # noted when the cache asked the store
        auth.revoke_token(s, world["root"], row.id)  # as another server process would: no forget
    clock.advance(TOKEN_CACHE_SECONDS - 0.001)
    assert cache.user_for_token(token) is not None  # still trusted: the documented window
    clock.advance(0.001)
    assert cache.user_for_token(token) is None

    with db.session() as s:
        again = auth.create_token(s, world["alice"], by=world["alice"], clock=clock)
    assert cache.user_for_token(again) is not None
    with db.session() as s:
        removal.disable_user(s, "alice", stop_jobs=False, by=world["root"], clock=clock)
    assert not cache.user_for_token(again).disabled  # cached ...
    cache.forget(user_ids=[world["alice"].id])
    assert cache.user_for_token(again).disabled  # ... until forgotten: the API then refuses it


# -- users --------------------------------------------------------------------------------


def test_disabling_keeps_the_users_jobs_unless_asked_to_stop_them(db: Database, clock, world, backend) -> None:
    alice = world["alice"]
    waiting, running = submit(db, clock, alice), submit(db, clock, alice)
    start(db, clock, running, backend)
    with db.session() as s:
        token = auth.create_token(s, alice, by=alice, clock=clock)
        result = removal.disable_user(s, "alice", stop_jobs=False, by=world["root"], clock=clock)
    assert (result.done, result.keptJobs, result.stoppedJobs) == ("disabled user alice", [waiting, running], [])
    assert states(db, waiting, running) == ["WAITING", "RUNNING"]
    with db.session() as s:
        assert auth.authenticate(s, token).disabled
        assert removal.enable_user(s, "alice").disabled is False
    with db.session() as s:
        result = removal.disable_user(s, "alice", stop_jobs=True, by=world["root"], clock=clock)
    assert (result.stoppedJobs, result.keptJobs) == ([waiting, running], [])
    assert states(db, waiting, running) == ["STOPPED", "STOPPING"]
    with db.session() as s:
        events = s.scalars(select(JobEventRow.message).where(JobEventRow.job_id == running)).all()
        assert events[-1] == "stop requested by root to disable user alice"


def test_an_admin_cannot_disable_or_delete_themselves(db: Database, clock, world) -> None:
    with db.session() as s:
        with pytest.raises(Conflict, match="cannot disable yourself"):
            removal.disable_user(s, "root", stop_jobs=False, by=world["root"], clock=clock)
        with pytest.raises(Conflict, match="cannot delete yourself"):
            removal.delete_user(s, "root", force=True, by=world["root"], clock=clock)
        with pytest.raises(NotFound, match="no user named 'carol'"):
            removal.disable_user(s, "carol", stop_jobs=False, by=world["root"], clock=clock)


def test_deleting_a_user_with_jobs_is_refused_naming_them_and_force_stops_them(
    db: Database, clock, world, backend
) -> None:
    alice = world["alice"]
    done = submit(db, clock, alice)
    with db.session() as s:
        job_service.request_stop(s, alice, done, clock=clock)
    waiting, running = submit(db, clock, alice, "vision"), submit(db, clock, alice)
    start(db, clock, running, backend)
    with db.session() as s:
        token = auth.create_token(s, alice, by=alice, clock=clock)
        admin.set_user_quota(s, "alice", priority="prod", gpus=1)
        admin.grant_vc(s, "vision", "alice")
    with pytest.raises(Conflict) as refused, db.session() as s:
        removal.delete_user(s, "alice", force=False, by=world["root"], clock=clock)
    assert (
        f"cannot delete user alice: they have waiting or running jobs: jobs {waiting} (alice, WAITING), "
        f"{running} (alice, RUNNING)"
    ) in refused.value.message
    assert "`yard user delete alice --force`" in refused.value.message
    assert states(db, waiting, running) == ["WAITING", "RUNNING"]  # nothing was kept of the refused delete

    with db.session() as s:
        result = removal.delete_user(s, "alice", force=True, by=world["root"], clock=clock)
    assert (result.done, result.stoppedJobs) == ("deleted user alice", [waiting, running])
    assert states(db, done, waiting, running) == ["STOPPED", "STOPPED", "STOPPING"]
    with db.session() as s:
        assert auth.authenticate(s, token) is None
        assert s.get(UserRow, alice.id).deleted_at == clock.now()
        for row in (MembershipRow, VcGrantRow, UserQuotaRow):
            assert s.scalars(select(row).where(row.user_id == alice.id)).all() == []
        assert [u.name for u in auth.list_users(s)] == ["bob", "root"]
        # The history keeps her name; the name is hers for good.
        assert {j.user for j in job_service.list_jobs(s, world["root"], user="alice")[0]} == {s.get(UserRow, alice.id)}
        with pytest.raises(NotFound, match="no user named 'alice' .deleted."):
            admin.grant_vc(s, "vision", "alice")
        with pytest.raises(Conflict, match="was deleted.*choose another name"):
            auth.create_user(s, "alice", is_admin=False, clock=clock)


# -- virtual clusters, grants, members ----------------------------------------------------


def test_deleting_a_vc_is_refused_while_jobs_use_it_and_force_stops_them(db: Database, clock, world, backend) -> None:
    bob = world["bob"]
    with db.session() as s:
        with pytest.raises(Conflict, match="'default' is built in"):
            removal.delete_vc(s, "default", force=True, by=world["root"], clock=clock)
        with pytest.raises(NotFound, match="no virtual cluster named 'nlp'"):
            removal.delete_vc(s, "nlp", force=True, by=world["root"], clock=clock)
    elsewhere = submit(db, clock, bob)
    waiting, running = submit(db, clock, bob, "vision"), submit(db, clock, bob, "vision")
    start(db, clock, running, backend)
    with (
        pytest.raises(
            Conflict,
            match=f"cannot delete virtual cluster vision: jobs use it: "
            f"jobs {waiting} .bob, WAITING., {running} .bob, RUNNING.",
        ),
        db.session() as s,
    ):
        removal.delete_vc(s, "vision", force=False, by=world["root"], clock=clock)
    with db.session() as s:
        result = removal.delete_vc(s, "vision", force=True, by=world["root"], clock=clock)
    assert result.stoppedJobs == [waiting, running]
    assert states(db, elsewhere, waiting, running) == ["WAITING", "STOPPED", "STOPPING"]
    with db.session() as s:
        assert [v.name for v in admin.list_vcs(s)] == []
        assert s.scalars(select(VcGrantRow)).all() == []
        assert s.get(JobRow, waiting).vc == "vision"  # the history keeps the VC's name
        admin.create_vc(s, "vision", gpus=1, model=None, preemption=True, clock=clock)  # the name is free again


def test_a_stopping_job_of_a_deleted_vc_ends_and_the_queue_goes_on(db: Database, clock, world, backend) -> None:
    """The controller, for real: the scheduler sees a job of a VC that is gone while it stops."""
    controller = Controller(db, backend, clock)
    running = submit(db, clock, world["bob"], "vision")
    controller.run_once()  # placed and launched: a real `sleep 600` under its supervisor
    assert states(db, running) == ["RUNNING"]
    with db.session() as s:
        removal.delete_vc(s, "vision", force=True, by=world["root"], clock=clock)
    with db.session() as s:
        after = job_service.submit_job(s, world["bob"], parse_job(job_file(command="true")), clock=clock).id

    def cycle_until(done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + scaled(30)
        while not done():  # the task's process ends on its own time: poll it, bounded
            assert time.monotonic() < deadline, f"jobs still {states(db, running, after)}"
            controller.run_once()
            time.sleep(0.05)

    cycle_until(lambda: states(db, running, after)[0] == "STOPPED" and states(db, after)[0] == "SUCCEEDED")
    with db.session() as s:
        assert s.get(JobRow, running).state_message == "stopped by root"


def test_removing_a_grant_is_refused_only_for_jobs_that_depend_on_it(db: Database, clock, world, backend) -> None:
    alice, bob = world["alice"], world["bob"]
    with db.session() as s:
        admin.grant_vc(s, "vision", "alice")  # alice may use vision twice over: herself and @cv
    alices, bobs = submit(db, clock, alice, "vision"), submit(db, clock, bob, "vision")
    start(db, clock, bobs, backend)
    with db.session() as s:
        assert removal.revoke_grant(s, "vision", "alice", force=False, by=world["root"], clock=clock).stoppedJobs == []
    with (
        pytest.raises(Conflict, match=f"job {bobs} .bob, RUNNING.*yard vc revoke vision bob --force"),
        db.session() as s,
    ):
        removal.revoke_grant(s, "vision", "bob", force=False, by=world["root"], clock=clock)
    with db.session() as s:
        with pytest.raises(NotFound, match="alice has no grant on virtual cluster vision"):
            removal.revoke_grant(s, "vision", "alice", force=False, by=world["root"], clock=clock)
        with pytest.raises(NotFound, match="'default' is open to everyone"):
            removal.revoke_grant(s, "default", "alice", force=False, by=world["root"], clock=clock)
        with pytest.raises(NotFound, match="no group named 'nlp'"):
            removal.revoke_grant(s, "vision", "@nlp", force=False, by=world["root"], clock=clock)
        result = removal.revoke_grant(s, "vision", "bob", force=True, by=world["root"], clock=clock)
    assert (result.done, result.stoppedJobs) == ("bob may no longer submit to vision", [bobs])
    assert states(db, alices, bobs) == ["WAITING", "STOPPING"]
    with db.session() as s:
        assert [v.users for v in admin.describe_vcs(s) if v.name == "vision"] == [[]]
    with pytest.raises(Conflict, match=f"job {alices} .alice, WAITING."), db.session() as s:
        removal.revoke_grant(s, "vision", "@cv", force=False, by=world["root"], clock=clock)
    with db.session() as s:  # the refused removal kept nothing
        assert [v.groups for v in admin.describe_vcs(s) if v.name == "vision"] == [["cv"]]


def test_removing_a_member_is_refused_while_the_group_lets_their_jobs_run(db: Database, clock, world) -> None:
    alice = world["alice"]
    in_vision, in_default = submit(db, clock, alice, "vision"), submit(db, clock, alice)
    with (
        pytest.raises(
            Conflict,
            match=f"cannot remove alice from group cv: .* job {in_vision} "
            r".alice, WAITING.*yard group remove cv alice --force",
        ),
        db.session() as s,
    ):
        removal.remove_member(s, "cv", "alice", force=False, by=world["root"], clock=clock)
    with db.session() as s:
        with pytest.raises(NotFound, match="bob is not in group cv"):
            removal.remove_member(s, "cv", "bob", force=False, by=world["root"], clock=clock)
        result = removal.remove_member(s, "cv", "alice", force=True, by=world["root"], clock=clock)
    assert (result.done, result.stoppedJobs) == ("alice is no longer in group cv", [in_vision])
    assert states(db, in_vision, in_default) == ["STOPPED", "WAITING"]
    with db.session() as s:
        assert {g.name: members for g, members in admin.list_groups(s)} == {"cv": []}
