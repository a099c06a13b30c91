"""Services on a real store: SQLite, and PostgreSQL when configured."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, select

from trainyard.core.clock import FakeClock
from trainyard.core.states import JobState
from trainyard.services import admin, auth
from trainyard.services import jobs as job_service
from trainyard.services.errors import Conflict, Forbidden, Invalid, NotFound
from trainyard.spec.loading import parse_job
from trainyard.store.db import Database, migrations_config
from trainyard.store.queries import metrics as metric_queries
from trainyard.store.rows import (
    LATEST_GPU_FIELDS,
    Base,
    JobEventRow,
    JobRow,
    NodeRow,
    NodeSampleRow,
    TaskSampleRow,
    TokenRow,
)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def add_node(db: Database, clock: FakeClock, gpus: int = 4) -> None:
    with db.session() as s:
        s.add(NodeRow(name="n1", backend="local", address="127.0.0.1", cpu_milli=8000, memory_mb=16384,
                      gpus=[{"index": i, "model": "simulated", "memory_mb": 0} for i in range(gpus)],
                      schedulable=True, updated_at=clock.now()))


SPEC = "name: j\ntaskRoles:\n  m:\n    resourcePerInstance: {gpu: 1}\n    commands: ['true']\n"


def schema_of(db: Database) -> dict[str, dict[str, object]]:
    """Every table's columns, keys, indexes and constraints, as the database reports them."""
    inspector = inspect(db.engine)
    return {
        table: {
            "columns": [(c["name"], str(c["type"]), c["nullable"]) for c in inspector.get_columns(table)],
            "primary key": inspector.get_pk_constraint(table)["constrained_columns"],
            "foreign keys": sorted((tuple(fk["constrained_columns"]), fk["referred_table"])
                                   for fk in inspector.get_foreign_keys(table)),
            "indexes": sorted((ix["name"], tuple(ix["column_names"]), bool(ix["unique"]))
                              for ix in inspector.get_indexes(table)),
            "unique": sorted(tuple(u["column_names"]) for u in inspector.get_unique_constraints(table)),
        }
        for table in sorted(inspector.get_table_names())
    }


def test_migrations_are_idempotent(db: Database) -> None:
    once = schema_of(db)  # the fixture has migrated once
    db.migrate()
    assert schema_of(db) == once
    assert set(once) >= {"alembic_version", "jobs", "attempts", "tasks", "users", "virtual_clusters"}


def test_the_migrated_schema_is_at_the_one_head_and_matches_the_models(db: Database) -> None:
    heads = ScriptDirectory.from_config(migrations_config()).get_heads()
    assert len(heads) == 1, f"the Alembic chain has split: heads {heads}"
    with db.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert context.get_current_revision() == heads[0]
        # A model changed without a migration (or the reverse) shows up here.
        assert compare_metadata(context, Base.metadata) == []


def test_the_first_admin_is_bootstrapped_once_and_tokens_are_stored_hashed(db: Database, clock) -> None:
    with db.session() as s:
        token = auth.bootstrap_admin(s, clock=clock)
    with db.session() as s:
        assert auth.bootstrap_admin(s, clock=clock) is None
        stored = s.scalars(select(TokenRow)).all()
        assert len(stored) == 1 and token not in (stored[0].token_hash, stored[0].prefix + "x")
        assert stored[0].token_hash == auth.hash_token(token)
        assert auth.authenticate(s, token).name == "admin"
        assert auth.authenticate(s, token + "x") is None


def test_user_names_are_validated_and_unique(db: Database, clock) -> None:
    with db.session() as s:
        auth.create_user(s, "alice", is_admin=False, clock=clock)
    with db.session() as s, pytest.raises(Conflict):
        auth.create_user(s, "alice", is_admin=False, clock=clock)
    with db.session() as s, pytest.raises(Invalid):
        auth.create_user(s, "Alice; rm -rf /", is_admin=False, clock=clock)


def test_only_admins_create_tokens_for_others(db: Database, clock) -> None:
    with db.session() as s:
        alice = auth.create_user(s, "alice", is_admin=False, clock=clock)
        bob = auth.create_user(s, "bob", is_admin=False, clock=clock)
        assert auth.create_token(s, alice, by=alice, clock=clock).startswith("ty_")
        with pytest.raises(Forbidden):
            auth.create_token(s, bob, by=alice, clock=clock)


def test_jobs_are_listed_newest_first_in_pages_and_filtered(db: Database, clock) -> None:
    add_node(db, clock)
    with db.session() as s:
        alice = auth.create_user(s, "alice", is_admin=False, clock=clock)
        admin = auth.create_user(s, "root", is_admin=True, clock=clock)
        ids = [job_service.submit_job(s, alice, parse_job(SPEC), clock=clock).id for _ in range(5)]
        other = job_service.submit_job(s, admin, parse_job(SPEC), clock=clock).id
    with db.session() as s:
        page, cursor = job_service.list_jobs(s, alice, limit=2)
        assert [j.id for j in page] == ids[::-1][:2] and cursor == ids[3]
        page, cursor = job_service.list_jobs(s, alice, limit=2, before=cursor)
        assert [j.id for j in page] == [ids[2], ids[1]]
        page, cursor = job_service.list_jobs(s, alice, limit=2, before=cursor)
        assert [j.id for j in page] == [ids[0]] and cursor is None
        assert [j.id for j in job_service.list_jobs(s, admin, user="root")[0]] == [other]
        assert len(job_service.list_jobs(s, admin, state="waiting")[0]) == 6
        assert job_service.list_jobs(s, admin, state="RUNNING")[0] == []
        with pytest.raises(Invalid):
            job_service.list_jobs(s, admin, state="BOGUS")


def test_another_users_job_is_not_found_and_cannot_be_stopped(db: Database, clock) -> None:
    add_node(db, clock)
    with db.session() as s:
        alice = auth.create_user(s, "alice", is_admin=False, clock=clock)
        bob = auth.create_user(s, "bob", is_admin=False, clock=clock)
        job_id = job_service.submit_job(s, alice, parse_job(SPEC), clock=clock).id
    with db.session() as s:
        with pytest.raises(NotFound):
            job_service.get_job(s, bob, job_id)
        with pytest.raises(NotFound):
            job_service.request_stop(s, bob, job_id, clock=clock)
    with db.session() as s:
        assert job_service.request_stop(s, alice, job_id, clock=clock).state == JobState.STOPPED
    with db.session() as s, pytest.raises(Conflict):
        job_service.request_stop(s, alice, job_id, clock=clock)
    with db.session() as s:
        kinds = [e.kind for e in s.scalars(select(JobEventRow).order_by(JobEventRow.id))]
        assert kinds == ["submitted", "stop-requested", "stopped"]  # a waiting job stops at once


def test_a_job_that_can_never_fit_is_refused_and_nothing_is_stored(db: Database, clock) -> None:
    add_node(db, clock, gpus=2)
    with db.session() as s:
        alice = auth.create_user(s, "alice", is_admin=False, clock=clock)
    with pytest.raises(Invalid) as caught, db.session() as s:
        job_service.submit_job(s, alice, parse_job(SPEC.replace("gpu: 1", "gpu: 3")), clock=clock)
    assert "the largest node has 2" in caught.value.message
    with db.session() as s:
        assert s.scalars(select(JobRow)).all() == []


def test_a_guaranteed_job_bigger_than_its_vcs_quota_and_borrowing_limit_is_refused(db: Database, clock) -> None:
    add_node(db, clock, gpus=4)
    with db.session() as s:
        alice = auth.create_user(s, "alice", is_admin=False, clock=clock)
        admin.create_vc(s, "vision", gpus=1, model=None, preemption=True, clock=clock)
        admin.grant_vc(s, "vision", "alice")
    big = SPEC.replace("gpu: 1", "gpu: 2") + "defaults: {virtualCluster: vision}\n"
    with db.session() as s:  # with no borrowing limit, it may borrow idle GPUs beyond its quota
        job_service.submit_job(s, alice, parse_job(big), clock=clock)
    unlent = job_service.SubmitLimits(borrowing=False)
    with pytest.raises(Invalid) as caught, db.session() as s:
        job_service.submit_job(s, alice, parse_job(big), clock=clock, limits=unlent)
    assert caught.value.message.startswith("the job needs 2 GPU but VC vision guarantees 1: it could never start")
    assert "priority: oppo" in caught.value.message
    with db.session() as s:
        admin.set_vc_borrowing(s, "vision", borrow_limit=1)
        job_service.submit_job(s, alice, parse_job(big), clock=clock)  # 1 guaranteed + 1 borrowed
    with pytest.raises(Invalid) as caught, db.session() as s:
        job_service.submit_job(s, alice, parse_job(big.replace("gpu: 2", "gpu: 3")), clock=clock)
    assert caught.value.message.startswith(
        "the job needs 3 GPU but VC vision guarantees 1 and may borrow 1 of each model: it could never start")
    with db.session() as s:  # within default's 3 guaranteed GPUs, and as oppo in vision: fine
        job_service.submit_job(s, alice, parse_job(SPEC.replace("gpu: 1", "gpu: 3")), clock=clock, limits=unlent)
        job_service.submit_job(s, alice, parse_job(big + "priority: oppo\n"), clock=clock, limits=unlent)
    with pytest.raises(Invalid) as caught, db.session() as s:  # default: the GPUs no VC is guaranteed
        job_service.submit_job(s, alice, parse_job(SPEC.replace("gpu: 1", "gpu: 4")), clock=clock, limits=unlent)
    assert "lower other VCs' quotas" in caught.value.message and "yard vc quota default" not in caught.value.message


def test_a_job_bigger_than_its_owners_quota_at_its_priority_is_refused(db: Database, clock) -> None:
    add_node(db, clock, gpus=4)
    with db.session() as s:
        alice = auth.create_user(s, "alice", is_admin=False, clock=clock)
        admin.set_user_quota(s, "alice", priority="prod", gpus=1)
    prod = SPEC.replace("gpu: 1", "gpu: 2") + "priority: prod\n"
    with pytest.raises(Invalid) as caught, db.session() as s:
        job_service.submit_job(s, alice, parse_job(prod), clock=clock)
    assert caught.value.message.startswith("the job needs 2 GPU but user alice may hold at most 1 at priority prod")
    assert caught.value.details[0]["path"] == "priority"
    with db.session() as s:  # within the limit, or at a priority without one: fine
        job_service.submit_job(s, alice, parse_job(prod.replace("gpu: 2", "gpu: 1")), clock=clock)
        job_service.submit_job(s, alice, parse_job(SPEC.replace("gpu: 1", "gpu: 2")), clock=clock)


def test_a_concurrent_change_to_a_job_is_detected_not_overwritten(db: Database, clock) -> None:
    from sqlalchemy.orm.exc import StaleDataError

    add_node(db, clock)
    with db.session() as s:
        alice = auth.create_user(s, "alice", is_admin=False, clock=clock)
        job_id = job_service.submit_job(s, alice, parse_job(SPEC), clock=clock).id
    with pytest.raises(StaleDataError), db.session() as first:
        stale = first.get(JobRow, job_id)
        with db.session() as second:
            job_service.request_stop(second, alice, job_id, clock=clock)
        stale.pending_message = "written by a slower writer"
        first.flush()
    with db.session() as s:
        assert s.get(JobRow, job_id).state == JobState.STOPPED


def test_the_migration_chain_builds_exactly_the_models_schema(db: Database) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from trainyard.store.rows import Base

    with db.engine.connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), Base.metadata) == []


def test_upgrading_fills_each_nodes_and_tasks_newest_figures_from_the_raw_history(database_url: str) -> None:
    before = ScriptDirectory.from_config(migrations_config()).get_revision("0012").down_revision
    db = Database(database_url)
    try:
        config = migrations_config()
        with db.engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, str(before))
        t0 = datetime(2026, 1, 1, tzinfo=UTC)
        gpu = {"index": 0, "model": "A100", "memory_total_mb": 40960, "util_pct": 30.0}  # older rows lack fields
        with db.session() as s:
            for seconds, step in ((0, 0), (10, 0), (60, 60)):  # a per-minute average is not a sample
                at = t0 + timedelta(seconds=seconds)
                s.add(NodeSampleRow(node="n1", at=at, step=step, cpu_pct=float(seconds), gpus=[gpu]))
                s.add(TaskSampleRow(job_id=3, attempt=1, role="w", index=0, node="n1", at=at, step=step,
                                    cpu_cores=float(seconds), gpus_held=1.0))
        db.migrate()
        with db.session() as s:
            [node] = metric_queries.latest_node_samples(s, t0)
            [task] = metric_queries.latest_task_samples(s, t0)
            assert (node.at, node.cpu_pct, task.at, task.cpu_cores, task.job_id, task.attempt) == (
                t0 + timedelta(seconds=10), 10.0, t0 + timedelta(seconds=10), 10.0, 3, 1)
            assert node.gpu_dicts() == [{**dict.fromkeys(LATEST_GPU_FIELDS), **gpu, "simulated": False,
                                         "healthy": True}]
    finally:
        db.dispose()
