"""What one scheduling cycle has decided so far, shared by its phases."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from trainyard.core.resources import MILLI
from trainyard.scheduler.capacity import Tentative
from trainyard.scheduler.ledger import Ledger
from trainyard.scheduler.placement import fits_somewhere, place_gang
from trainyard.scheduler.quota import Owner, Refusal, job_owner
from trainyard.scheduler.scorers.base import Scorer
from trainyard.scheduler.snapshot import (
    PendingJob,
    PendingReason,
    Preempt,
    RunningJob,
    Snapshot,
    StartJob,
    TaskPlacement,
    TaskRequest,
)

# What decides whether a job can start (``shape``): VC, user or None, priority, borrowed, and
# its tasks, as a number (equal tuples of tasks, the same number within a cycle).
Shape = tuple[str, str | None, int, bool, int]


@dataclass(frozen=True)
class Worker:
    """An elastic job's worker beyond its minimum, as the planner sees it (``elastic``)."""

    job_id: int
    role: str
    index: int


@dataclass
class Wait:
    """Why a job keeps waiting, with what the message is made of (worded in ``reasons``)."""

    reason: PendingReason
    refusal: Refusal | None = None
    eta: float | None = None
    reservation: Reservation | None = None  # for the head (NO_FIT/QUOTA) and RESERVED
    victims: tuple[int, ...] = ()  # for PREEMPTING
    # Over its VC's quota and tried as borrowed work (``borrowing``): why that did not
    # start it (None: what may be borrowed was enough, the free GPUs were not).
    borrow_tried: bool = False
    borrow_refusal: Refusal | None = None
    # Guaranteed, but its tasks can never fit its VC's cells (``outside_cells``): it runs
    # only as borrowed work, and waits with this reason until it can.
    outside_cells: bool = False
    # Not tried: the cycle stopped at its bound of starts first (``SchedulerConfig.max_starts``).
    untried: bool = False
    # PREEMPTING for consolidation (``consolidate``): its victims are moved elsewhere.
    moving: bool = False


@dataclass
class Reservation:
    """EASY backfill's hold for the first job of a queue that cannot start.

    ``start`` is the earliest time it fits by the running jobs' expected ends (``inf`` when
    that needs jobs whose end is unknown). Its resources and quota stay held for it, so
    only jobs known to end before ``start`` (``max_runtime``) may use them meanwhile.

    A reservation without a start time holds nothing until its job has waited
    ``SchedulerConfig.drain_after`` seconds (``drains_at``): until then smaller jobs start
    on idle GPUs as if there were no reservation, and only then does it drain them — or,
    with ``SchedulerConfig.reserve_at_once``, it holds at once against lower priorities.
    """

    job: PendingJob
    start: float
    placements: list[TaskPlacement]
    owner: Owner
    hold: Tentative | None = None
    drains_at: float = -math.inf
    # What its hold charges to quota (``Ledger.hold_reserved``), worked out at the first hold.
    charges: list[TaskPlacement] | None = field(default=None, repr=False, compare=False)
    # ``SchedulerConfig.reserve_at_once``: before ``drains_at`` it already holds against jobs
    # of lower priority than its own (``spares`` the others).
    at_once: bool = False

    def holds(self, now: float) -> bool:
        return self.drains_at <= now or self.at_once

    def spares(self, job: PendingJob, now: float) -> bool:
        """Whether, holding at once (``at_once``) but not drained yet, it lets ``job`` try
        as if it held nothing: a job of its own priority or higher."""
        return self.at_once and now < self.drains_at and job.priority_rank <= self.job.priority_rank

    def apply(self, ledger: Ledger) -> None:
        if self.hold is None and self.holds(ledger.now):
            self.hold = Tentative()
            self.charges = ledger.hold_reserved(self.owner, self.placements, self.hold, self.charges)

    def lift(self) -> None:
        if self.hold is not None:
            self.hold.discard()
            self.hold = None

    def lets_pass(self, job: PendingJob, now: float) -> bool:
        """Whether ``job`` surely ends before the reservation starts."""
        return job.max_runtime is not None and now + job.max_runtime <= self.start


@dataclass
class Cycle:
    snapshot: Snapshot
    ledger: Ledger
    scorer: Scorer
    starts: list[StartJob] = field(default_factory=list)
    started: list[RunningJob] = field(default_factory=list)  # this cycle's starts, as running work
    waits: dict[int, Wait] = field(default_factory=dict)
    preemptions: list[Preempt] = field(default_factory=list)
    claimed: set[int] = field(default_factory=set)  # running jobs a plan of this cycle stops (read sorted)
    reservations: list[Reservation] = field(default_factory=list)
    # Running jobs in preemption order, sorted once per cycle (see ``preemption``).
    victims: tuple[list[RunningJob], dict[str, list[RunningJob]]] | None = None
    # Running jobs whose time slice is over, with the service they have attained, by
    # priority (see ``preemption.takes_turn_from``), derived once per cycle.
    turns: dict[int, list[tuple[float, RunningJob]]] | None = None
    # The guaranteed GPUs (milli) that stopping work frees, by (VC, model), and how many
    # claims they count (``claimed`` only grows): see ``preemption._over_quota``.
    stopping_gpus: dict[tuple[str, str], int] | None = None
    stopping_claims: int = -1
    # Each VC's weighted borrowed share at the start of the cycle (``preemption.borrow_shares``).
    borrow_shares: dict[str, float] | None = None
    # Waiting jobs that fair share put behind jobs of other users submitted after them:
    # how many (``fairshare.overtaken``), for why-pending.
    overtaken: dict[int, int] = field(default_factory=dict)
    # Whether a job of a VC and tasks outside HiveD's promise would start alone on the
    # emptied cluster (``schedule.never_in_cells``), tried once per cycle.
    alone: dict[tuple[str, tuple[tuple[Any, ...], ...]], bool] = field(default_factory=dict)
    # ``shape``'s answers by job (the job kept with it: its id is not reused while it lives),
    # and a number per distinct tuple of tasks: the phases ask for a job's shape several
    # times, and a tuple of tasks is hashed field by field at every dictionary lookup.
    shapes: dict[int, tuple[PendingJob, Shape]] = field(default_factory=dict)
    task_kinds: dict[tuple[TaskRequest, ...], int] = field(default_factory=dict)
    # Elastic jobs' removable workers, by the id each has as running work (``elastic.split``).
    workers: dict[int, Worker] = field(default_factory=dict)
    # A queue pass started ``SchedulerConfig.max_starts`` jobs: the cycle tries no more.
    capped: bool = False
    # Jobs consolidation moved in this cycle (``consolidate``), against its budget; and the
    # running jobs it might move for some job (``consolidate.movable_work``), found once.
    moves: int = 0
    movable: list[RunningJob] | None = None

    def start(self, job: PendingJob, placements: list[TaskPlacement]) -> None:
        self.starts.append(StartJob(job.job_id, tuple(placements), borrowed=job.borrowing))
        if job.borrowing and self.borrow_shares is not None:  # its VC's weighted borrowed share grows
            policy = self.ledger.quotas.vcs.get(job.vc)
            weight = policy.weight if policy is not None and policy.weight > 0 else 1.0
            self.borrow_shares[job.vc] += sum(t.gpu_milli for t in job.tasks) / MILLI / weight
        owner = job_owner(job)
        now = self.snapshot.now
        end = None if job.max_runtime is None else now + job.max_runtime
        self.started.append(RunningJob(
            job.job_id, owner.vc, owner.user, owner.rank, tuple(placements), now, end,
            suspendable=job.suspendable, attained_service=job.attained_service, borrowed=job.borrowing,
        ))

    def wait(self, job: PendingJob, wait: Wait) -> None:
        self.waits[job.job_id] = wait


def shape(cycle: Cycle, job: PendingJob) -> Shape:
    """What decides whether a job can start: its VC, priority, whether it is tried as
    borrowed work, and tasks, and its user only when that user has a quota at that
    priority or the job asks for a GPU fraction (which devices it may share depends on
    whose shares are on them: ``sharing``). Worked out once per job and cycle (what it reads
    does not change within one)."""
    known = cycle.shapes.get(id(job))
    if known is not None and known[0] is job:
        return known[1]
    tasks = job.tasks
    number = cycle.task_kinds.get(tasks)
    if number is None:
        number = cycle.task_kinds[tasks] = len(cycle.task_kinds)
    fraction = not cycle.ledger.sharing.open and any(0 < t.gpu_milli < MILLI for t in tasks)
    user = job.user if fraction or (job.user, job.priority_rank) in cycle.snapshot.user_quotas else None
    kind: Shape = (job.vc, user, job.priority_rank, job.borrowing, number)
    cycle.shapes[id(job)] = (job, kind)
    return kind


def start_if_fits(cycle: Cycle, job: PendingJob) -> bool:
    """Admit and place the whole gang now, and record its start; False, changing nothing, if not."""
    ledger = cycle.ledger
    if ledger.quotas.admit(job) is not None:
        return False
    if fits_somewhere(job, ledger, cells=False) is False:  # cheaper than the scorer's search to say no
        return False
    attempt = Tentative()
    placements = place_gang(job, ledger, cycle.scorer, attempt)
    if placements is None:
        return False
    attempt.commit()
    cycle.start(job, placements)
    cycle.waits.pop(job.job_id, None)
    return True
