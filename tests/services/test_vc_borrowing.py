"""A VC's borrowing settings (limits and weight) on a real store, ``default``'s kept in the
``meta`` table, as the scheduler gets them; and the borrowed share in the VC views: attempts
running borrowed, and apart from it opportunistic jobs, never in ``used``."""

from __future__ import annotations

import pytest
from services.usage_world import T0, Run, add_job
from sqlalchemy import select

from trainyard.backends.base import GpuInfo, NodeInventory
from trainyard.controller.inventory import sync_inventory
from trainyard.controller.world import virtual_clusters
from trainyard.core.clock import FakeClock
from trainyard.services import admin, auth
from trainyard.services.errors import Invalid, NotFound
from trainyard.store.rows import AttemptRow, MetaRow


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def cluster(db, clock):
    """Node n1 with 8 A100s; VCs vision (4 GPUs) and speech (2); alice."""
    with db.session() as s:
        gpus = tuple(GpuInfo(i, "A100", 40000) for i in range(8))
        sync_inventory(s, "local", [NodeInventory("n1", "127.0.0.1", 64000, 512000, gpus)], clock)
        auth.create_user(s, "alice", is_admin=False, clock=clock)
        admin.create_vc(s, "vision", gpus=4, model=None, preemption=True, clock=clock)
        admin.create_vc(s, "speech", gpus=2, model=None, preemption=True, clock=clock, borrow_limit=1, weight=2.5)
    return db


def scheduler_view(db) -> dict[str, tuple[int | None, int | None, float]]:
    with db.session() as s:
        return {vc.name: (vc.borrow_limit, vc.lend_limit, vc.weight) for vc in virtual_clusters(s)}


def test_limits_and_weights_reach_the_scheduler_and_what_is_not_given_stays(cluster) -> None:
    assert scheduler_view(cluster) == {
        "default": (None, None, 1.0), "vision": (None, None, 1.0), "speech": (1, None, 2.5),
    }
    with cluster.session() as s:
        admin.set_vc_borrowing(s, "vision", borrow_limit=3, lend_limit=0)
        admin.set_vc_borrowing(s, "speech", weight=0.5)  # its borrow limit stays
        admin.set_vc_borrowing(s, "default", borrow_limit=2, weight=4)
    assert scheduler_view(cluster) == {
        "default": (2, None, 4.0), "vision": (3, 0, 1.0), "speech": (1, None, 0.5),
    }
    with cluster.session() as s:
        admin.set_vc_borrowing(s, "vision", borrow_limit=None)  # None: no limit, not "unchanged"
        admin.set_vc_borrowing(s, "default", borrow_limit=None, lend_limit=1)
        stored = {row.key: row.value for row in s.scalars(select(MetaRow).where(MetaRow.key.like("vc.%")))}
    assert stored == {"vc.default.lend_limit": "1", "vc.default.weight": "4.0"}  # no row for "no limit"
    assert scheduler_view(cluster) == {
        "default": (None, 1, 4.0), "vision": (None, 0, 1.0), "speech": (1, None, 0.5),
    }
    with cluster.session() as s:
        views = {v.name: v for v in admin.describe_vcs(s)}
    assert (views["default"].borrowLimit, views["default"].lendLimit, views["default"].weight) == (None, 1, 4.0)
    assert (views["speech"].borrowLimit, views["speech"].weight) == (1, 0.5)


BAD_CHANGES = [
    ({"borrow_limit": -1}, "borrowLimit"),
    ({"lend_limit": 1.5}, "lendLimit"),
    ({"lend_limit": True}, "lendLimit"),
    ({"weight": 0}, "weight"),
    ({"weight": 1001}, "weight"),
    ({"weight": float("nan")}, "weight"),
]


def test_a_bad_limit_or_weight_is_refused_with_its_field_and_nothing_changes(cluster) -> None:
    for change, path in BAD_CHANGES:
        with cluster.session() as s, pytest.raises(Invalid) as refused:
            admin.set_vc_borrowing(s, "speech", **{"lend_limit": 3, **change})
        assert refused.value.details[0]["path"] == path, change
        with cluster.session() as s, pytest.raises(Invalid):
            admin.create_vc(s, "nlp", gpus=1, model=None, preemption=True, clock=FakeClock(), **change)
    with cluster.session() as s, pytest.raises(NotFound, match="no virtual cluster named 'nope'"):
        admin.set_vc_borrowing(s, "nope", weight=2)
    assert scheduler_view(cluster)["speech"] == (1, None, 2.5)
    assert "nlp" not in scheduler_view(cluster)


def test_a_stored_default_setting_that_is_no_number_counts_as_unset(cluster) -> None:
    with cluster.session() as s:
        s.add(MetaRow(key="vc.default.weight", value="heavy"))
    assert scheduler_view(cluster)["default"] == (None, None, 1.0)


def holding(db, vc: str, gpus: list[int], *, borrowed: bool = False, priority: str = "normal") -> int:
    """A running job of alice's in ``vc`` holding these whole GPUs of n1, its attempt borrowed or not."""
    with db.session() as s:
        job = add_job(s, auth.get_user(s, "alice"), [[Run(T0, None, gpus=[[i, 1000] for i in gpus])]], vc=vc)
        attempt = s.scalars(select(AttemptRow).where(AttemptRow.job_id == job)).one()
        attempt.borrowed = borrowed
        attempt.job.priority = priority
    return job


def test_borrowed_attempts_and_opportunistic_jobs_are_apart_from_used(cluster) -> None:
    holding(cluster, "speech", [0, 1])  # within its quota
    holding(cluster, "speech", [2], borrowed=True)  # beyond it, on vision's idle GPUs
    holding(cluster, "speech", [3], priority="oppo")
    holding(cluster, "vision", [4, 5], borrowed=True, priority="prod")
    with cluster.session() as s:
        views = {v.name: v for v in admin.describe_vcs(s)}
    # Borrowed work is what a borrowing limit counts; opportunistic work is apart from it.
    assert (views["speech"].used, views["speech"].borrowed, views["speech"].opportunistic) == (2, 1, 1)
    assert (views["vision"].used, views["vision"].borrowed, views["vision"].opportunistic) == (0, 2, 0)
    assert (views["default"].used, views["default"].borrowed, views["default"].opportunistic) == (0, 0, 0)
