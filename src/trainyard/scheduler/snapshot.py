"""The scheduler's inputs and outputs: an immutable snapshot in, decisions out.

Contract (as HiveD writes at the top of its core): inputs are read-only, ``schedule`` is
never called concurrently with itself, and the same snapshot always yields the same
decisions, whatever the order of the tuples in it. The live controller and the simulator
build these from their own worlds.

Every field added after the first cut has a default that reproduces the first cut's
behaviour: no ``vcs`` means one virtual cluster without quota limits, no ``running`` means
no quota usage, no preemption victims and no reservations from known end times.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property

from trainyard.core.priorities import OPPORTUNISTIC_RANK
from trainyard.core.sharing import DEFAULT_GPU_SHARING, GpuSharing

# The placement scorer when none is configured, for the live controller (``Settings``) and
# the simulator's ``--policy default`` alike: one name, defined here only.
DEFAULT_SCORER = "fgd-cpu"


@dataclass(frozen=True)
class GpuSlot:
    index: int
    model: str
    memory_mb: int
    used_milli: int = 0  # already allocated, 0..1000
    # PCIe switch / NUMA group the device sits in (from NVML or configuration); "" when
    # unknown. Never guessed from the index: a wrong topology is worse than none.
    group: str = ""


@dataclass(frozen=True)
class NodeState:
    name: str
    cpu_milli: int
    memory_mb: int
    gpus: tuple[GpuSlot, ...] = ()
    cpu_used_milli: int = 0
    memory_used_mb: int = 0
    schedulable: bool = True  # cordoned or unhealthy: nothing new lands here
    labels: Mapping[str, str] = field(default_factory=dict)  # e.g. {"rack": "r1"}


@dataclass(frozen=True)
class TaskRequest:
    role: str
    index: int
    gpu_milli: int = 0
    cpu_milli: int = 1000
    memory_mb: int = 1024
    gpu_models: tuple[str, ...] = ()  # empty: any model
    gpu_memory_mb: int = 0  # minimum memory per device
    # The task takes a whole node (``taskRoles.<role>.nodes``): every GPU, all the CPU and
    # all the memory of one empty node whose GPUs all suit ``gpu_models``/``gpu_memory_mb``,
    # and nothing else shares the node while it runs (``whole_nodes``). Its GPU, CPU and
    # memory fields are then the least a suitable node offers (``whole_nodes.resolve``),
    # which admission, backfill and the reasons count; the placement takes the node's all.
    whole_node: bool = False
    # A resource expression (CEL, ``core/selectors.py``) the node, and for a task with GPUs
    # each device it takes, must make true; "": any.
    selector: str = ""


@dataclass(frozen=True)
class PendingJob:
    job_id: int
    priority_rank: int  # ``core.priorities``: 0 is the highest (prod); OPPORTUNISTIC_RANK and below, oppo
    submitted_at: float  # seconds; only the order matters
    tasks: tuple[TaskRequest, ...]
    user: str = ""
    vc: str = "default"
    max_runtime: float | None = None  # seconds, as declared; lets the job backfill
    # When it last started waiting (a requeued job keeps its submit time for its place in
    # the queue, but its wait starts again); None: since ``submitted_at``.
    waiting_since: float | None = None
    # It saves its state and resumes when told to (``preemption: suspend``): it may be
    # suspended to let another job take its turn (``SchedulerConfig.timeshare``).
    suspendable: bool = False
    # GPU-seconds its chain has received so far, across suspensions and requeues: with
    # time-sharing, jobs of one priority wait in order of it (least attained service first).
    attained_service: float = 0.0
    # The nodes its last attempt was lost on (a platform fault: a node down, a port held
    # there, an account missing there): placed elsewhere when it fits elsewhere.
    avoid_nodes: frozenset[str] = frozenset()
    # Nodes whose dataset cache holds every dataset the job reads (issue 35): among nodes
    # that fit its tasks alike, placement takes these first (``ledger.data_first``).
    data_nodes: frozenset[str] = frozenset()
    # Set by the scheduler alone, on the copy it tries as borrowed work (``borrowing``):
    # over its VC's quota, placed on other VCs' idle guaranteed GPUs. Inputs leave it False.
    borrowing: bool = False
    # Elastic (``elastic``): the tasks it may add beyond ``tasks`` (its minimum, the gang
    # that starts it), in the order they are added; () for a job of fixed size.
    grow: tuple[TaskRequest, ...] = ()
    # An elastic job's throughput by number of workers, as measured points ascending
    # (``elastic.throughput``); (): unknown, taken as linear (every worker helps alike).
    speedup: tuple[tuple[int, float], ...] = ()
    # Set by the scheduler alone, on an elastic job's worker beyond its minimum that it
    # places (``elastic.grow``): it holds no quota and no cells. Inputs leave it False.
    extra: bool = False


@dataclass(frozen=True)
class VirtualCluster:
    name: str
    quota: Mapping[str, int] = field(default_factory=dict)  # GPU model -> whole GPUs guaranteed
    allow_priority_preemption: bool = True  # higher-priority guaranteed jobs may preempt lower
    # Whose fractional GPU shares the VC's jobs may share a device with (``core.sharing``);
    # a VC not in the snapshot has the default.
    gpu_sharing: GpuSharing = DEFAULT_GPU_SHARING
    # Borrowing (``borrowing.py``): at most this many GPUs of each model its jobs may hold
    # beyond its quota as borrowed work (None: no limit; 0: it never borrows) ...
    borrow_limit: int | None = None
    # ... at most this many of its quota's unused GPUs of each model may be lent to other
    # VCs' borrowed work (None: all of them; 0: it never lends) ...
    lend_limit: int | None = None
    # ... and its weight: idle GPUs go to the VCs that want them in proportion to it.
    weight: float = 1.0


@dataclass(frozen=True)
class TaskPlacement:
    role: str
    index: int
    node: str
    gpus: tuple[GpuShare, ...] = ()
    cpu_milli: int = 0
    memory_mb: int = 0
    whole_node: bool = False  # the task holds its node alone (``TaskRequest.whole_node``)


@dataclass(frozen=True)
class RunningJob:
    """Work that holds resources now (its usage is also in the nodes' ``*_used`` fields)."""

    job_id: int
    vc: str
    user: str
    priority_rank: int
    placements: tuple[TaskPlacement, ...]
    started_at: float
    expected_end: float | None = None  # None: unknown, treated as never ending
    grace_seconds: float = 30.0  # stop grace period if it is preempted
    stops_by: float | None = None  # being stopped: when its grace period ends (None: unknown)
    suspendable: bool = False  # as ``PendingJob.suspendable``
    # GPU-seconds its chain received before ``started_at`` (its last start or resume);
    # ``attained_at`` adds what this run has received since.
    attained_service: float = 0.0
    # It runs on GPUs its VC borrowed beyond its quota (``borrowing.py``): like opportunistic
    # work it holds no quota and no cells, and is reclaimed when a lender needs them back.
    borrowed: bool = False
    # Elastic (``elastic``): the tasks it may still add, in the order they are added; its
    # running workers beyond its minimum that may be removed, the first to go first; and
    # those being removed (they hold their resources until they have exited).
    grow: tuple[TaskRequest, ...] = ()
    shrink: tuple[tuple[str, int], ...] = ()
    leaving: tuple[tuple[str, int], ...] = ()
    speedup: tuple[tuple[int, float], ...] = ()  # as ``PendingJob.speedup``
    # When its workers last (re)started together at a new size (None: at ``started_at``):
    # it grows no sooner than ``SchedulerConfig.grow_interval`` after it.
    resized_at: float | None = None
    # Set by the scheduler alone (``elastic.split``): one worker of an elastic job beyond its
    # minimum, as work of its own: it holds no quota and no cells, and any plan takes it
    # before it stops or suspends a job — those whose job loses least without them first
    # (``worth``: the share of its speed the job would lose). Inputs leave them unset.
    extra: bool = False
    worth: float = 0.0

    @cached_property
    def guaranteed(self) -> bool:
        """Whether it runs within its VC's guarantee (not opportunistic, not borrowed, not
        an elastic job's extra worker): only such work holds quota and cells and is never
        reclaimed by another VC."""
        return self.priority_rank < OPPORTUNISTIC_RANK and not self.borrowed and not self.extra

    def attained_at(self, now: float) -> float:
        """GPU-seconds its chain has received by ``now`` (least attained service's measure)."""
        return self.attained_service + self.gpus * max(0.0, now - self.started_at)

    @cached_property
    def gpus(self) -> float:
        """GPUs it holds (fractions count as such)."""
        return sum(share.milli for p in self.placements for share in p.gpus) / 1000


@dataclass(frozen=True)
class WorkloadClass:
    """One kind of task in the target workload that placement measures fragmentation
    against: FGD counts the GPU kinds; ``fgd-cpu`` also the CPU-only ones, for CPU fragments."""

    gpu_milli: int  # per task: a fraction (< 1000), whole GPUs (a multiple of 1000), or 0: CPU only
    weight: float = 1.0
    cpu_milli: int = 0
    memory_mb: int = 0
    gpu_models: tuple[str, ...] = ()


@dataclass(frozen=True)
class SchedulerConfig:
    scorer: str = DEFAULT_SCORER  # a key of ``scorers.registry.SCORERS``
    backfill: bool = True  # EASY backfill with one reservation per queue
    # A reservation that waits for jobs without an expected end holds GPUs only once its
    # job has waited this long (seconds); until then smaller jobs fill idle GPUs freely.
    drain_after: float = 300.0
    rack_label: str = "rack"  # the node label the topology scorer groups nodes by
    # GPUs per cell, by model; unset models derive it (see ``cells``).
    cell_gpus: Mapping[str, int] = field(default_factory=dict)
    # The placement's target workload; empty: the mix of the pending jobs' tasks.
    workload: tuple[WorkloadClass, ...] = ()
    # Time-sharing (docs/scheduling.md): within a VC and a priority, jobs wait in order of
    # attained service, and a waiting job may suspend a running suspendable job that has
    # received more, once that one has run ``time_slice`` seconds since it last (re)started.
    timeshare: bool = True
    time_slice: float = 1800.0
    # "More" is (``turns``): at least ``turn_ratio`` times the waiting job's service, and
    # more than ``turn_floor`` GPU-seconds (2 GPU-hours).
    turn_ratio: float = 2.0
    turn_floor: float = 7200.0
    # The GPU sharing rule of a VC the snapshot does not list (``core.sharing``): the
    # implicit VC of a snapshot without ``vcs``, as the simulator runs.
    gpu_sharing: GpuSharing = DEFAULT_GPU_SHARING
    # Borrowing (``borrowing.py``): a guaranteed job over its VC's quota may run on other
    # VCs' idle guaranteed GPUs, as reclaimable borrowed work.
    borrowing: bool = True
    # Fair share (``fairshare.py``): among jobs of one VC and priority, users with less
    # recent usage go first, usage decaying with this half-life (seconds); 0: off, submit
    # order as before.
    fair_share_half_life: float = 7 * 24 * 3600.0
    # Bounded work per cycle, as Slurm's ``sched_max_job_start``: once a queue pass has
    # started this many jobs the cycle stops trying more (no preemption, borrowing or growth
    # in it either); the jobs not yet tried wait ``BEHIND`` and ``Decisions.more`` asks for
    # the next cycle at once. The starts made are the first ones an unbounded cycle makes.
    # 0: no bound (the simulator's and the tests' default; ``yard up`` sets one).
    max_starts: int = 0
    # Elastic jobs (``elastic.grow``) grow no sooner than this long (seconds) after their
    # workers last (re)started — a start or a resize, each of which restarts every worker:
    # without it a job grows into every GPU that frees for a moment and gives it back at the
    # next short job, restarting its workers each time. Shrinks are never held back (a
    # guarantee, a priority or a turn needs the GPUs). 0: at once (the simulator's and the
    # tests' default; ``yard up`` sets one).
    grow_interval: float = 0.0
    # Consolidation (``consolidate``): a guaranteed job that waits only because no node has
    # room together, though GPUs free and held by suspendable work would do, may have that
    # work moved: suspended to resume at once on GPUs free elsewhere. At most
    # ``moves_per_hour`` moves in any hour (``Snapshot.recent_moves`` says how many the
    # caller made in the last one; 0: never, the default) and ``moves_per_cycle`` a cycle,
    # and never a job that has run less than ``move_after`` seconds since it last
    # (re)started (no churn).
    moves_per_hour: int = 0
    moves_per_cycle: int = 4
    move_after: float = 1800.0
    # Kueue-like policies (``docs/scheduling.md``, "Kueue's preemption policies"); both off
    # by default, so that the default decisions (and the simulator's tables) stay as they were.
    # ``borrow_within_vcs`` (Kueue's ``borrowWithinCohort: LowerPriority``): a job tried as
    # borrowed work may also reclaim other VCs' borrowed work of lower priority, at once (no
    # time slice, no fair-share test). Another VC's guaranteed work stays out of its reach.
    borrow_within_vcs: bool = False
    # ``reserve_at_once``: a guaranteed job's reservation that waits for jobs without an
    # expected end holds at once against jobs of lower priority (they start only on what it
    # does not need), and against the rest after ``drain_after`` as before.
    reserve_at_once: bool = False


@dataclass(frozen=True)
class Snapshot:
    nodes: tuple[NodeState, ...]
    pending: tuple[PendingJob, ...]
    now: float = 0.0
    vcs: tuple[VirtualCluster, ...] = ()  # empty: one VC without limits, for every job
    user_quotas: Mapping[tuple[str, int], int] = field(default_factory=dict)  # (user, rank) -> milli-GPU
    running: tuple[RunningJob, ...] = ()
    preempting: frozenset[int] = frozenset()  # running jobs already signalled to stop
    user_groups: Mapping[str, frozenset[str]] = field(default_factory=dict)  # user -> groups (``same-group``)
    # Recent usage for fair share (``fairshare.py``), as of ``now``, decayed with the
    # configured half-life, running work included: GPU-seconds per (VC, user), and the
    # GPU-seconds each VC's borrowed work has received.
    usage: Mapping[tuple[str, str], float] = field(default_factory=dict)
    borrowed_usage: Mapping[str, float] = field(default_factory=dict)
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    # Consolidation's moves (``Preempt.move``) the caller carried out in the hour before
    # ``now``: what is left of ``SchedulerConfig.moves_per_hour`` is the rest.
    recent_moves: int = 0


class PendingReason(StrEnum):
    NO_FIT = "NO_FIT"  # the free resources cannot hold the gang right now
    BEHIND = "BEHIND"  # not considered: jobs ahead in its queue already use what is left
    QUOTA = "QUOTA"  # over its VC's guaranteed quota (or an unknown VC)
    USER_QUOTA = "USER_QUOTA"  # over its user's quota at this priority
    RESERVED = "RESERVED"  # would fit, but would delay the reservation of a job ahead
    PREEMPTING = "PREEMPTING"  # victims were asked to stop; starts once they have
    BORROW_LIMIT = "BORROW_LIMIT"  # over its VC's quota, and borrowing more is over a limit
    # Placed, but its ports could not be reserved on a node (the controller's, not the
    # scheduler's: e.g. other programs hold the range); it is placed again next cycle.
    PORTS = "PORTS"
    # Waits for other jobs (the job file's ``dependencies``): the controller's, not the
    # scheduler's, which never sees such a job until they are met (controller/dependencies.py).
    DEPENDENCY = "DEPENDENCY"
    # The controller's: its last attempt failed or was lost, and it retries after a back-off
    # (``controller/retries.py``), doubling with each such attempt.
    RETRY = "RETRY"
    # A member of a sweep already running as many jobs as its ``parallel`` allows (the
    # controller's, not the scheduler's: such jobs are left out of its input).
    SWEEP_LIMIT = "SWEEP_LIMIT"


@dataclass(frozen=True)
class GpuShare:
    index: int
    milli: int  # 1000 for a whole device


@dataclass(frozen=True)
class StartJob:
    job_id: int
    placements: tuple[TaskPlacement, ...]
    borrowed: bool = False  # it starts as borrowed work (``RunningJob.borrowed``)


@dataclass(frozen=True)
class KeepWaiting:
    job_id: int
    reason: PendingReason
    message: str
    position: int  # 1-based place among the jobs of its VC still waiting after this cycle
    eta: float | None = None  # estimated start (seconds since the epoch), when derivable
    short: str = ""  # the reason in a few words, for tables: "vision 0/2 free, needs 2"
    # The nodes backfill reserves for it (the first waiting job of a queue that holds a
    # reservation), where it will likely run: its datasets are fetched there meanwhile.
    reserved_nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Preempt:
    job_id: int
    grace_seconds: float
    reason: str
    for_job_id: int
    # The victim is suspendable: it is told to save its state and waits SUSPENDED to resume,
    # keeping its place (else it is stopped and requeued); the simulator charges a
    # suspension its cost.
    suspend: bool = False
    # Consolidation moved it (``consolidate``): suspended so that it resumes on GPUs free
    # elsewhere, to free a node for ``for_job_id``; it counts against the moves' budget.
    move: bool = False


@dataclass(frozen=True)
class Grow:
    """Add workers to a running elastic job (``elastic``): each task a worker beyond its
    minimum, placed on idle resources."""

    job_id: int
    placements: tuple[TaskPlacement, ...]


@dataclass(frozen=True)
class Shrink:
    """Remove workers beyond its minimum from a running elastic job, so that ``for_job_id``
    fits: told to stop, they hold their resources until they have exited."""

    job_id: int
    tasks: tuple[tuple[str, int], ...]  # (role, index)
    grace_seconds: float
    reason: str
    for_job_id: int


@dataclass(frozen=True)
class Decisions:
    starts: tuple[StartJob, ...] = ()
    waits: tuple[KeepWaiting, ...] = field(default_factory=tuple)
    preemptions: tuple[Preempt, ...] = ()
    grows: tuple[Grow, ...] = ()
    shrinks: tuple[Shrink, ...] = ()
    # The cycle stopped at ``SchedulerConfig.max_starts``: jobs were left untried, so the
    # caller runs the next cycle at once rather than at its next tick.
    more: bool = False
