"""What one scheduling cycle has decided so far, shared by its phases."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from trainyard.scheduler.capacity import Tentative
from trainyard.scheduler.ledger import Ledger
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
)


@dataclass
class Wait:
    """Why a job keeps waiting, with what the message is made of (worded in ``reasons``)."""

    reason: PendingReason
    refusal: Refusal | None = None
    eta: float | None = None
    reservation: Reservation | None = None  # for the head (NO_FIT/QUOTA) and RESERVED
    victims: tuple[int, ...] = ()  # for PREEMPTING


@dataclass
class Reservation:
    """EASY backfill's hold for the first job of a queue that cannot start.

    ``start`` is the earliest time it fits by the running jobs' expected ends (``inf`` when
    that needs jobs whose end is unknown). Its resources and quota stay held for it, so
    only jobs known to end before ``start`` (``max_runtime``) may use them meanwhile.

    A reservation without a start time holds nothing until its job has waited
    ``SchedulerConfig.drain_after`` seconds (``drains_at``): until then smaller jobs start
    on idle GPUs as if there were no reservation, and only then does it drain them.
    """

    job: PendingJob
    start: float
    placements: list[TaskPlacement]
    owner: Owner
    hold: Tentative | None = None
    drains_at: float = -math.inf

    def holds(self, now: float) -> bool:
        return self.drains_at <= now

    def apply(self, ledger: Ledger) -> None:
        if self.hold is None and self.holds(ledger.now):
            self.hold = Tentative()
            ledger.hold_reserved(self.owner, self.placements, self.hold)

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

    def start(self, job: PendingJob, placements: list[TaskPlacement]) -> None:
        self.starts.append(StartJob(job.job_id, tuple(placements)))
        owner = job_owner(job)
        now = self.snapshot.now
        end = None if job.max_runtime is None else now + job.max_runtime
        self.started.append(RunningJob(
            job.job_id, owner.vc, owner.user, owner.rank, tuple(placements), now, end,
            suspendable=job.suspendable, attained_service=job.attained_service,
        ))

    def wait(self, job: PendingJob, wait: Wait) -> None:
        self.waits[job.job_id] = wait
