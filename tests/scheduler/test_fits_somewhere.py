"""``placement.fits_somewhere``: a yes or no without a scorer's search, which must be the
scorers' own answer wherever it gives one (the speed of a cycle relies on it, and its
decisions must not change)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, note, settings
from hypothesis import strategies as st

from trainyard.scheduler.capacity import Tentative
from trainyard.scheduler.ledger import Ledger
from trainyard.scheduler.placement import fits_somewhere, place_gang
from trainyard.scheduler.scorers.registry import SCORERS
from trainyard.scheduler.snapshot import (
    GpuSlot,
    NodeState,
    PendingJob,
    SchedulerConfig,
    Snapshot,
    TaskRequest,
    VirtualCluster,
)

USERS = ("alice", "bob", "carol")
VCS = ("a", "b")
GPU_REQUESTS = (0, 250, 500, 1000, 1000, 2000, 4000, 8000)


@st.composite
def clusters(draw):
    """Nodes of one model, or some of several (where only a scorer can tell), partly used."""
    mixed = draw(st.booleans())
    nodes = []
    for n in range(draw(st.integers(1, 6))):
        gpus = draw(st.sampled_from((0, 4, 8)))
        models = [draw(st.sampled_from(("A100", "V100"))) if mixed else "A100" for _ in range(gpus)]
        nodes.append(NodeState(
            f"n{n}", draw(st.integers(2, 32)) * 1000, draw(st.integers(2, 64)) * 1024,
            tuple(GpuSlot(i, models[i], 40960, 0, str(i // 4)) for i in range(gpus)),
            schedulable=draw(st.booleans()) or n == 0,
        ))
    return tuple(nodes)


@st.composite
def pending_job(draw, job_id: int):
    def task(index: int) -> TaskRequest:
        return TaskRequest("w", index, draw(st.sampled_from(GPU_REQUESTS)), draw(st.integers(0, 8)) * 500,
                           draw(st.integers(0, 8)) * 1024, gpu_models=draw(st.sampled_from(((), ("A100",), ("V100",)))))

    count = draw(st.integers(1, 3))
    if draw(st.booleans()):  # a gang of like tasks
        first = task(0)
        tasks = tuple(replace(first, index=i) for i in range(count))
    else:
        tasks = tuple(task(i) for i in range(count))
    return PendingJob(job_id, draw(st.integers(0, 3)), float(job_id), tasks, draw(st.sampled_from(USERS)),
                      draw(st.sampled_from(VCS)))


@st.composite
def worlds(draw):
    nodes = draw(clusters())
    vcs = tuple(VirtualCluster(vc, {m: draw(st.integers(0, 8)) for m in ("A100", "V100")}) for vc in VCS)
    placed = tuple(draw(pending_job(100 + i)) for i in range(draw(st.integers(0, 8))))
    asked = tuple(draw(pending_job(200 + i)) for i in range(draw(st.integers(1, 6))))
    return nodes, vcs, placed, asked, draw(st.sampled_from(sorted(SCORERS)))


@settings(max_examples=300, deadline=None)
@given(worlds(), st.booleans())
def test_where_it_answers_every_scorer_answers_the_same(world, borrowing) -> None:
    nodes, vcs, placed, asked, scorer_name = world
    snapshot = Snapshot(nodes, placed + asked, vcs=vcs, config=SchedulerConfig(scorer=scorer_name))
    ledger = Ledger(snapshot)
    scorer = SCORERS[scorer_name](snapshot)
    for job in placed:  # some work first: fractions of several users, cells bound, quota used
        if ledger.quotas.admit(job) is None:
            place_gang(job, ledger, scorer, Tentative())  # kept (never discarded)
    for job in asked:
        job = replace(job, borrowing=borrowing and job.priority_rank < 3)
        if ledger.quotas.admit(job) is not None:
            continue  # the callers ask only once admitted
        answer = fits_somewhere(job, ledger)
        if answer is None:
            continue
        attempt = Tentative()
        placed_now = place_gang(job, ledger, scorer, attempt) is not None
        attempt.discard()
        note(f"{scorer_name}: job {job}: fits_somewhere {answer}, place_gang {placed_now}")
        assert answer == placed_now
