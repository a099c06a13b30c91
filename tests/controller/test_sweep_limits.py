"""A sweep's ``parallel: N``: while N of its jobs run the others wait, saying why
(SWEEP_LIMIT), and start in index order as those end; a member's metric is read back from
its log (a pattern) or from what it reported (``runtime.report``'s file)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from worlds import World

from trainyard.services.sweep_metrics import MetricReader
from trainyard.store.rows import SweepMemberRow, SweepRow

MEMBER = """\
name: s-{i}
taskRoles:
  m:
    commands:
      - while [ ! -e '{go}' ]; do sleep 0.02; done
      - echo step 1 loss=9
      - echo step 2 loss=0.{i}5
      - mkdir -p "$TRAINYARD_JOB_DIR/.trainyard" && echo '{{"acc":{i}}}' > "$TRAINYARD_JOB_DIR/.trainyard/metrics.json"
"""


def make_sweep(world: World, size: int, parallel: int, go: Path) -> list[int]:
    """``size`` members, each waiting for the file ``go`` before it does its work."""
    jobs = [world.submit(MEMBER.format(i=i, go=go)) for i in range(size)]
    with world.db.session() as s:
        sweep = SweepRow(user_id=world.user.id, name="s", spec={}, parallel=parallel, metric=None,
                         created_at=world.clock.now())
        s.add(sweep)
        s.flush()
        s.add_all(SweepMemberRow(sweep_id=sweep.id, index=i, job_id=j, params={"i": i}) for i, j in enumerate(jobs))
    return jobs


def sweep_of(world: World, job_id: int) -> int:
    with world.db.session() as s:
        return s.query(SweepMemberRow).filter_by(job_id=job_id).one().sweep_id


def test_members_beyond_parallel_wait_with_the_reason_and_run_one_after_another(world: World, tmp_path: Path) -> None:
    go = tmp_path / "go"  # the first member runs until the test has looked at the others
    first, second, third = make_sweep(world, 3, parallel=1, go=go)
    world.cycle()
    assert world.job(first).state == "RUNNING"
    for waiting in (second, third):
        job = world.job(waiting)
        assert (job.state, job.pending_reason) == ("WAITING", "SWEEP_LIMIT"), world.explain(waiting)
        assert "parallel: 1" in (job.pending_message or "")
    # Counted in the cycle it starts (a new user's trial read "0/2 running" beside two running).
    short = f"sweep {sweep_of(world, first)}: 1/1 running"
    assert [world.job(j).pending_short for j in (second, third)] == [short] * 2
    world.controller.run_once()  # the next cycle, unwoken: still so
    assert [world.job(j).pending_short for j in (second, third)] == [short] * 2
    go.touch()
    ended = [world.drive(j) for j in (first, second, third)]
    assert [j.state for j in ended] == ["SUCCEEDED"] * 3
    for earlier, later in zip(ended, ended[1:], strict=False):
        assert earlier.finished_at is not None and later.started_at is not None
        assert later.started_at >= earlier.finished_at  # never two at once
    server = SimpleNamespace(backend=world.backend, db=world.db)
    by_log = MetricReader(server, {"pattern": r"loss=([0-9.]+)"})  # type: ignore[arg-type]
    assert [by_log.value(j) for j in ended] == ["0.05", "0.15", "0.25"]  # the last matching line
    reported = MetricReader(server, {"name": "acc"})  # type: ignore[arg-type]
    assert [reported.value(j) for j in ended] == ["0", "1", "2"]
    assert MetricReader(server, {"name": "nope"}).value(ended[0]) is None  # type: ignore[arg-type]


def test_a_sweep_without_a_cap_is_left_alone(world: World, tmp_path: Path) -> None:
    jobs = make_sweep(world, 2, parallel=2, go=tmp_path / "go")
    world.cycle()
    assert [world.job(j).state for j in jobs] == ["RUNNING", "RUNNING"]
    (tmp_path / "go").touch()
    for j in jobs:
        world.drive(j)



def test_a_pattern_that_backtracks_for_ever_is_timed_out_and_shows_nothing(world: World) -> None:
    # "(a+)+$" on 38 a's and a '!' backtracks for hours in Python's `re`, the interpreter lock
    # held; the reader's engine times each search out (and the test's timeout says if not).
    job_id = world.submit("name: m\ntaskRoles:\n  main:\n    commands: [\"printf 'a%.0s' $(seq 38); echo '!'\"]\n")
    job = world.drive(job_id)
    assert job.state == "SUCCEEDED"
    server = SimpleNamespace(backend=world.backend, db=world.db)
    assert MetricReader(server, {"pattern": "(a+)+$"}).value(job) is None  # type: ignore[arg-type]
    assert MetricReader(server, {"pattern": "(a+)!"}).value(job) == "a" * 38  # type: ignore[arg-type]
