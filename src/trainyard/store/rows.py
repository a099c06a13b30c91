"""ORM rows: the tables of Trainyard's store. Names end in ``Row``; domain types live in core."""

from __future__ import annotations

from datetime import UTC, date, datetime
from operator import itemgetter
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from trainyard.core.sharing import DEFAULT_GPU_SHARING


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every database (SQLite drops the zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime given to the store; use UTC-aware datetimes")
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    pass


class UserRow(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # A disabled user's tokens are refused; their jobs are kept (``services.removal``).
    disabled: Mapped[bool] = mapped_column(Boolean, default=False)
    # Deleted users stay as rows, so that their jobs' history still names them; their
    # tokens, memberships, grants and quotas are gone, and the name is not reused.
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    # For the portal's sign-in: scrypt, with its parameters and salt (``services.passwords``);
    # None until the user (or an admin) sets one. Tokens work either way.
    password_hash: Mapped[str | None] = mapped_column(String(255), nullable=True)
    # Where their job notices are e-mailed (set by them or an admin), and their default
    # ``{"on": [...], "email": bool, "webhook": url}`` for jobs whose file says nothing
    # (``services.notices``); None: no notices unless a job asks.
    email: Mapped[str | None] = mapped_column(String(254), nullable=True)
    notify: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


class TokenRow(Base):
    __tablename__ = "tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(128), default="")
    # SHA-256 of the token: tokens are 256-bit random strings, so a fast hash is safe here
    # (unlike passwords, they cannot be guessed from a dictionary).
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    # Written when the token cache asks the store, so true to within TOKEN_CACHE_SECONDS.
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)

    user: Mapped[UserRow] = relationship(lazy="joined")


class WebSessionRow(Base):
    """A signed-in browser (``services.web_sessions``): the cookie's SHA-256, as for tokens,
    and the secret its forms carry against cross-site requests."""

    __tablename__ = "web_sessions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    csrf_token: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # How it signed in: "password" or "token" (shown on the user's sessions).
    method: Mapped[str] = mapped_column(String(16))
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    # The token it signed in with (method "token"): revoking that token ends this session.
    token_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)

    user: Mapped[UserRow] = relationship(lazy="joined")


class SignInLimitRow(Base):
    """Sign-in tries counted per key (``user:NAME``, ``address:IP``) in a window that begins
    at the first one (``services.sign_in_limits``): in the store, so that concurrent tries
    count one after the other and a restart forgets nothing."""

    __tablename__ = "sign_in_limits"

    key: Mapped[str] = mapped_column(String(160), primary_key=True)
    window_start: Mapped[datetime] = mapped_column(UTCDateTime, index=True)
    attempts: Mapped[int] = mapped_column(Integer)


class JobRow(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        Index("ix_jobs_state_id", "state", "id"),
        Index("ix_jobs_user_id_id", "user_id", "id"),
        Index("ix_jobs_user_id_state", "user_id", "state"),  # the count of a user's waiting jobs
        Index("ix_jobs_vc_id", "vc", "id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    vc: Mapped[str] = mapped_column(String(64))
    priority: Mapped[str] = mapped_column(String(16))
    state: Mapped[str] = mapped_column(String(16))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)  # normalised, secrets included
    submitted_at: Mapped[datetime] = mapped_column(UTCDateTime)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    attempt: Mapped[int] = mapped_column(Integer, default=0)  # current attempt number
    retries_used: Mapped[int] = mapped_column(Integer, default=0)
    grace_seconds: Mapped[float] = mapped_column(default=30.0)
    max_runtime_seconds: Mapped[int | None] = mapped_column(Integer, nullable=True)  # per attempt
    # From the job file (``preemption: suspend``, ``watchdogSeconds``), for the controller's
    # queries: whether it may be suspended, and after how long without output it hangs.
    suspendable: Mapped[bool] = mapped_column(default=False)
    watchdog_seconds: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Who keeps it SUSPENDED (its owner or an admin, ``yard suspend``) until ``yard resume``;
    # None when the scheduler may resume it.
    held_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # GPU-seconds its ended attempts received (least attained service's measure).
    attained_gpu_seconds: Mapped[float] = mapped_column(default=0.0)
    pending_reason: Mapped[str | None] = mapped_column(String(32), nullable=True)
    pending_message: Mapped[str | None] = mapped_column(Text, nullable=True)
    pending_short: Mapped[str | None] = mapped_column(Text, nullable=True)  # the reason in a few words
    pending_position: Mapped[int | None] = mapped_column(Integer, nullable=True)
    pending_eta: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)  # estimated start
    state_message: Mapped[str] = mapped_column(Text, default="")
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    stopped_by: Mapped[str | None] = mapped_column(String(64), nullable=True)
    stop_reason: Mapped[str | None] = mapped_column(Text, nullable=True)  # why, when the stopper said
    # The working directory its tasks start in: an upload's digest (``WorkdirRow``), or None.
    workdir: Mapped[str | None] = mapped_column(String(71), nullable=True, index=True)
    # The most instances of its elastic role (``instances: {min, max}``); None: a fixed size.
    elastic_max: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Optimistic concurrency: the API and the controller both move jobs; an UPDATE that
    # lost a race fails with StaleDataError instead of silently overwriting.
    version: Mapped[int] = mapped_column(Integer, default=1)

    user: Mapped[UserRow] = relationship(lazy="joined")
    attempts: Mapped[list[AttemptRow]] = relationship(
        back_populates="job", order_by="AttemptRow.number", cascade="all, delete-orphan"
    )

    __mapper_args__ = {"version_id_col": version}


class AttemptRow(Base):
    __tablename__ = "attempts"
    __table_args__ = (UniqueConstraint("job_id", "number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    reason: Mapped[str] = mapped_column(Text, default="")
    # When it was told to stop (preempted, timed out, stop requested): its tasks' grace
    # period runs from about then.
    stop_requested_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    master_port: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # It started over its VC's quota, on other VCs' idle guaranteed GPUs: reclaimable.
    borrowed: Mapped[bool] = mapped_column(Boolean, default=False)

    job: Mapped[JobRow] = relationship(back_populates="attempts")
    tasks: Mapped[list[TaskRow]] = relationship(
        back_populates="attempt", order_by="(TaskRow.role, TaskRow.index)", cascade="all, delete-orphan"
    )


class TaskRow(Base):
    __tablename__ = "tasks"
    # ix_tasks_state: the unfinished tasks, a few among every task ever run (migration 0013).
    __table_args__ = (UniqueConstraint("attempt_id", "role", "index"), Index("ix_tasks_state", "state"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id", ondelete="CASCADE"), index=True)
    job_id: Mapped[int] = mapped_column(Integer, index=True)
    role: Mapped[str] = mapped_column(String(64))
    index: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(16))
    node: Mapped[str] = mapped_column(String(255))
    gpus: Mapped[list[list[int]]] = mapped_column(JSON)  # [[device index, milli], ...]
    cpu_milli: Mapped[int] = mapped_column(Integer)
    memory_mb: Mapped[int] = mapped_column(Integer)
    ports: Mapped[dict[str, list[int]]] = mapped_column(JSON)
    run: Mapped[int] = mapped_column(Integer, default=0)  # in-place retries so far
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    message: Mapped[str] = mapped_column(Text, default="")
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    stop_sent: Mapped[bool] = mapped_column(Boolean, default=False)
    # Elastic jobs: a worker told to leave (a shrink: it ends STOPPED), or to stop and start
    # again in place at the job's new size; and how many of its runs such restarts began.
    removed: Mapped[bool] = mapped_column(Boolean, default=False)
    restart: Mapped[bool] = mapped_column(Boolean, default=False)
    resizes: Mapped[int] = mapped_column(Integer, default=0)

    attempt: Mapped[AttemptRow] = relationship(back_populates="tasks")


class JobEventRow(Base):
    __tablename__ = "job_events"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    kind: Mapped[str] = mapped_column(String(32))
    message: Mapped[str] = mapped_column(Text)


class JobNoticeRow(Base):
    """A notice its owner asked for (``core.notices``), queued with the event it tells of
    (in the same transaction, so one per event and channel, kept across restarts) and sent
    by the alert tick (``controller/job_notices.py``): ``pending`` until it is sent, or
    ``failed`` after its last try (``error`` says why)."""

    __tablename__ = "job_notices"
    __table_args__ = (
        UniqueConstraint("event_id", "channel", name="uq_job_notices_event_id_channel"),
        Index("ix_job_notices_state_id", "state", "id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    event_id: Mapped[int] = mapped_column(ForeignKey("job_events.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))  # succeeded, failed, stopped, preempted
    channel: Mapped[str] = mapped_column(String(16))  # email | webhook
    target: Mapped[str] = mapped_column(Text)  # the URL (a webhook's); "" for e-mail: the owner's address when sent
    state: Mapped[str] = mapped_column(String(16), default="pending")  # pending | sent | failed
    tries: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)

    event: Mapped[JobEventRow] = relationship()
    job: Mapped[JobRow] = relationship()


class NodeRow(Base):
    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    backend: Mapped[str] = mapped_column(String(32))
    address: Mapped[str] = mapped_column(String(255))
    cpu_milli: Mapped[int] = mapped_column(Integer)
    memory_mb: Mapped[int] = mapped_column(Integer)
    # [{"index", "model", "memory_mb", "uuid", "simulated"}, ...]
    gpus: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    schedulable: Mapped[bool] = mapped_column(Boolean, default=True)  # as the backend reports
    cordoned: Mapped[bool] = mapped_column(Boolean, default=False)  # an admin's decision
    labels: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)  # as the backend reports
    # set by admins, over ``labels`` (None: removed); ``core.labels.merged_labels``
    admin_labels: Mapped[dict[str, str | None]] = mapped_column(JSON, default=dict)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class MetaRow(Base):
    """Facts about this store itself, e.g. its ``cluster_id``."""

    __tablename__ = "meta"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class GroupRow(Base):
    __tablename__ = "groups"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class MembershipRow(Base):
    __tablename__ = "memberships"

    group_id: Mapped[int] = mapped_column(ForeignKey("groups.id", ondelete="CASCADE"), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)


class VirtualClusterRow(Base):
    __tablename__ = "virtual_clusters"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    allow_priority_preemption: Mapped[bool] = mapped_column(Boolean, default=True)
    # Whose fractional GPU shares its jobs may share a device with: ``core.sharing.GpuSharing``.
    gpu_sharing: Mapped[str] = mapped_column(String(16), default=DEFAULT_GPU_SHARING.value)
    # Borrowing (``scheduler/borrowing.py``): whole GPUs of each model it may borrow beyond
    # its quota, and lend of its unused quota (None: no limit); its weight among borrowers.
    borrow_limit: Mapped[int | None] = mapped_column(Integer, nullable=True, default=None)
    lend_limit: Mapped[int | None] = mapped_column(Integer, nullable=True, default=None)
    weight: Mapped[float] = mapped_column(Float, default=1.0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    quotas: Mapped[list[VcQuotaRow]] = relationship(
        cascade="all, delete-orphan", order_by="VcQuotaRow.gpu_model", lazy="selectin"
    )
    grants: Mapped[list[VcGrantRow]] = relationship(cascade="all, delete-orphan", lazy="selectin")


class VcQuotaRow(Base):
    """Guaranteed whole GPUs of one model (``*``: any model) for a virtual cluster."""

    __tablename__ = "vc_quotas"

    vc_id: Mapped[int] = mapped_column(ForeignKey("virtual_clusters.id", ondelete="CASCADE"), primary_key=True)
    gpu_model: Mapped[str] = mapped_column(String(64), primary_key=True)
    gpus: Mapped[int] = mapped_column(Integer)


class VcGrantRow(Base):
    """Who may submit to a virtual cluster: one user, or every member of one group."""

    __tablename__ = "vc_grants"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    vc_id: Mapped[int] = mapped_column(ForeignKey("virtual_clusters.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), nullable=True)
    group_id: Mapped[int | None] = mapped_column(ForeignKey("groups.id", ondelete="CASCADE"), nullable=True)


class UserQuotaRow(Base):
    """At most ``gpu_milli`` GPUs held by one user at one priority (HAI Platform's quota)."""

    __tablename__ = "user_quotas"

    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    priority: Mapped[str] = mapped_column(String(16), primary_key=True)
    gpu_milli: Mapped[int] = mapped_column(Integer)


class StorageRow(Base):
    """A path every node has mounted (NFS, Lustre, a local disk), that jobs may mount when
    granted (``services.storages``); ``read_only`` makes it read-only for every job."""

    __tablename__ = "storages"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    path: Mapped[str] = mapped_column(Text)
    read_only: Mapped[bool] = mapped_column(Boolean, default=False)
    kind: Mapped[str] = mapped_column(String(32), default="")  # free text: nfs, lustre, local...
    description: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    grants: Mapped[list[StorageGrantRow]] = relationship(cascade="all, delete-orphan", lazy="selectin")


class StorageGrantRow(Base):
    """Who may mount a storage: one user, or every member of one group; read-only or not."""

    __tablename__ = "storage_grants"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    storage_id: Mapped[int] = mapped_column(ForeignKey("storages.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), nullable=True)
    group_id: Mapped[int | None] = mapped_column(ForeignKey("groups.id", ondelete="CASCADE"), nullable=True)
    read_only: Mapped[bool] = mapped_column(Boolean, default=False)


class DatasetRow(Base):
    """A named, versioned dataset (issue 35): where its files come from (``source``: a
    storage's folder, ``storage:NAME/PATH``, or an http(s) URL), which version of them
    (``version``, or the archive's ``sha256``), and who registered it. Nodes keep it in
    their cache keyed by name, source and version (``backends/datacache.py``)."""

    __tablename__ = "datasets"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    source: Mapped[str] = mapped_column(Text)
    version: Mapped[str] = mapped_column(String(128))
    sha256: Mapped[str] = mapped_column(String(64), default="")  # "": not checked
    description: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)

    grants: Mapped[list[DatasetGrantRow]] = relationship(cascade="all, delete-orphan", lazy="selectin")


class DatasetGrantRow(Base):
    """Who else may read a dataset: one user, or every member of one group."""

    __tablename__ = "dataset_grants"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset_id: Mapped[int] = mapped_column(ForeignKey("datasets.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), nullable=True)
    group_id: Mapped[int | None] = mapped_column(ForeignKey("groups.id", ondelete="CASCADE"), nullable=True)


class NodeSampleRow(Base):
    """A node's figures (``core.metrics.NodeSample``) at ``at``. ``step`` is the seconds one
    row covers: 0 for a raw sample, else the bucket a downsampled row averages (``monitor/``)."""

    __tablename__ = "node_samples"
    __table_args__ = (
        Index("ix_node_samples_node_step_at", "node", "step", "at"),
        Index("ix_node_samples_step_at", "step", "at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    node: Mapped[str] = mapped_column(String(255))
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    step: Mapped[int] = mapped_column(Integer, default=0)
    cpu_pct: Mapped[float | None] = mapped_column(Float, nullable=True)
    load1: Mapped[float | None] = mapped_column(Float, nullable=True)
    memory_used_mb: Mapped[int | None] = mapped_column(Integer, nullable=True)
    memory_total_mb: Mapped[int | None] = mapped_column(Integer, nullable=True)
    disk_used_pct: Mapped[float | None] = mapped_column(Float, nullable=True)
    net_rx_bytes_per_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    net_tx_bytes_per_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    # One dict per GPU, the fields of core.metrics.GpuSample but ``pids``.
    gpus: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)


class TaskSampleRow(Base):
    """A running task's figures (``core.metrics.TaskSample``) at ``at``; ``step`` as for
    ``NodeSampleRow``. Not a foreign key to tasks: history outlives nothing it describes,
    and is pruned by age alone."""

    __tablename__ = "task_samples"
    __table_args__ = (
        Index("ix_task_samples_job_step_at", "job_id", "step", "at"),
        Index("ix_task_samples_node_step_at", "node", "step", "at"),
        Index("ix_task_samples_step_at", "step", "at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(Integer)
    attempt: Mapped[int] = mapped_column(Integer)
    role: Mapped[str] = mapped_column(String(64))
    index: Mapped[int] = mapped_column(Integer)
    node: Mapped[str] = mapped_column(String(255))
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    step: Mapped[int] = mapped_column(Integer, default=0)
    cpu_cores: Mapped[float | None] = mapped_column(Float, nullable=True)
    memory_mb: Mapped[int | None] = mapped_column(Integer, nullable=True)
    gpus_held: Mapped[float] = mapped_column(Float, default=0.0)
    gpu_util_pct: Mapped[float | None] = mapped_column(Float, nullable=True)
    gpu_memory_mb: Mapped[int | None] = mapped_column(Integer, nullable=True)
    disk_read_bytes_per_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    disk_write_bytes_per_s: Mapped[float | None] = mapped_column(Float, nullable=True)


# The fields of a GPU in ``NodeLatestRow.gpus``, in order: ``core.metrics.GpuSample``'s but ``pids``.
LATEST_GPU_FIELDS = ("index", "model", "memory_total_mb", "util_pct", "memory_used_mb", "temperature_c",
                     "power_w", "ecc_errors", "simulated", "healthy")
# What a field missing from a stored GPU dict means (as ``GpuSample``'s defaults say).
_GPU_DEFAULTS: dict[str, Any] = {"simulated": False, "healthy": True}


class NodeLatestRow(Base):
    """A node's newest raw sample, the one row per node that the live views (``GET /nodes``,
    ``/top``), the alert rules and ``/metrics`` read instead of searching the history for it.
    Each monitoring round upserts it (``store.queries.metrics.add_samples``); ``monitor.
    history.maintain`` deletes it once the raw history would no longer hold it.

    ``gpus`` is one list per GPU, its fields in ``LATEST_GPU_FIELDS`` order: a scrape of 1,000
    eight-GPU nodes decodes it every time (the figures change every round), and lists decode
    in half the time of dicts that repeat every key.
    """

    __tablename__ = "node_latest"
    __table_args__ = (Index("ix_node_latest_at", "at"),)

    node: Mapped[str] = mapped_column(String(255), primary_key=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    cpu_pct: Mapped[float | None] = mapped_column(Float, nullable=True)
    load1: Mapped[float | None] = mapped_column(Float, nullable=True)
    memory_used_mb: Mapped[int | None] = mapped_column(Integer, nullable=True)
    memory_total_mb: Mapped[int | None] = mapped_column(Integer, nullable=True)
    disk_used_pct: Mapped[float | None] = mapped_column(Float, nullable=True)
    net_rx_bytes_per_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    net_tx_bytes_per_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    gpus: Mapped[list[list[Any]]] = mapped_column(JSON, default=list)

    def gpu_dicts(self) -> list[dict[str, Any]]:
        """The GPUs as ``NodeSampleRow.gpus`` holds them: one dict per GPU."""
        return [dict(zip(LATEST_GPU_FIELDS, gpu, strict=True)) for gpu in self.gpus]


_gpu_fields = itemgetter(*LATEST_GPU_FIELDS)


def latest_gpu_lists(gpus: list[dict[str, Any]]) -> list[list[Any]]:
    """``NodeSampleRow.gpus`` (dicts) as ``NodeLatestRow.gpus`` keeps them."""
    try:  # a round's dicts have every field (``monitor.history.node_row``): picked in one call each
        return [list(_gpu_fields(gpu)) for gpu in gpus]
    except KeyError:
        return [[gpu.get(f, _GPU_DEFAULTS.get(f)) for f in LATEST_GPU_FIELDS] for gpu in gpus]


class TaskLatestRow(Base):
    """A task's newest raw sample (one per job, attempt, role and index), read and written as
    ``NodeLatestRow``. A task that ends is sampled no more: its row ages out of freshness at
    once, and goes with the raw history."""

    __tablename__ = "task_latest"
    __table_args__ = (Index("ix_task_latest_at", "at"),)

    job_id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    role: Mapped[str] = mapped_column(String(64), primary_key=True)
    index: Mapped[int] = mapped_column(Integer, primary_key=True)
    node: Mapped[str] = mapped_column(String(255))
    at: Mapped[datetime] = mapped_column(UTCDateTime)
    cpu_cores: Mapped[float | None] = mapped_column(Float, nullable=True)
    memory_mb: Mapped[int | None] = mapped_column(Integer, nullable=True)
    gpus_held: Mapped[float] = mapped_column(Float, default=0.0)
    gpu_util_pct: Mapped[float | None] = mapped_column(Float, nullable=True)
    gpu_memory_mb: Mapped[int | None] = mapped_column(Integer, nullable=True)
    disk_read_bytes_per_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    disk_write_bytes_per_s: Mapped[float | None] = mapped_column(Float, nullable=True)


class UsageDayRow(Base):
    """A UTC day whose measured use is summed in ``task_usage_days`` (written with them, in
    one transaction: a day is there whole or not at all)."""

    __tablename__ = "usage_days"

    day: Mapped[date] = mapped_column(Date, primary_key=True)
    closed_at: Mapped[datetime] = mapped_column(UTCDateTime)
    tasks: Mapped[int] = mapped_column(Integer)  # how many tasks had a measured second that day


class TaskUsageDayRow(Base):
    """One task's measured use over one closed UTC day: the sums ``measured_use`` makes of
    its monitoring rows, clipped to the day. Not a foreign key to tasks: like the history,
    it outlives what it describes."""

    __tablename__ = "task_usage_days"
    __table_args__ = (Index("ix_task_usage_days_job_day", "job_id", "day"),)

    day: Mapped[date] = mapped_column(Date, ForeignKey("usage_days.day", ondelete="CASCADE"), primary_key=True)
    job_id: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    role: Mapped[str] = mapped_column(String(64), primary_key=True)
    index: Mapped[int] = mapped_column(Integer, primary_key=True)
    gpu_seconds_used: Mapped[float] = mapped_column(Float)
    gpu_seconds_measured: Mapped[float] = mapped_column(Float)
    cpu_core_seconds_used: Mapped[float] = mapped_column(Float)
    cpu_seconds_measured: Mapped[float] = mapped_column(Float)


class AlertRuleRow(Base):
    """An admin's settings for one alert rule (``monitor/alerts.py`` names the rules and
    their defaults; a rule without a row runs with them)."""

    __tablename__ = "alert_rules"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    cordon: Mapped[bool] = mapped_column(Boolean, default=False)  # node rules: cordon the node
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)


class AlertRow(Base):
    """One firing of a rule about one subject (``job:7``, ``node:gpu-3``); resolved in place.
    ``notified`` maps each receiver (``webhook:URL``, ``email``) to the state last delivered
    to it, so a failed delivery is retried on the next evaluation and a delivered one is
    never repeated to that receiver."""

    __tablename__ = "alerts"
    __table_args__ = (Index("ix_alerts_state_rule_subject", "state", "rule", "subject"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    rule: Mapped[str] = mapped_column(String(64))
    subject: Mapped[str] = mapped_column(String(300))
    job_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    node: Mapped[str | None] = mapped_column(String(255), nullable=True)
    state: Mapped[str] = mapped_column(String(16))  # firing | resolved
    severity: Mapped[str] = mapped_column(String(16))
    message: Mapped[str] = mapped_column(Text)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    notified: Mapped[dict[str, str]] = mapped_column(JSON, default=dict)


class EnvironmentRow(Base):
    """A software environment jobs run in (``yard env``, HAI's haienv): ``base`` ones an admin
    declares (a Python environment at ``path`` on every node, or an ``image``), ``custom`` ones
    Trainyard builds from ``requirements`` by the job ``build_job_id`` into ``path``, on top
    of ``base_id`` when given. Visible to its owner, and to ``group_id``'s members when
    ``visibility`` is "group"; a base environment with visibility "everyone" to all."""

    __tablename__ = "environments"
    __table_args__ = (Index("ix_environments_state", "state"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    kind: Mapped[str] = mapped_column(String(16))  # base | custom
    visibility: Mapped[str] = mapped_column(String(16))  # private | group | everyone
    # A deleted group leaves its environments visible to their owners only.
    group_id: Mapped[int | None] = mapped_column(ForeignKey("groups.id", ondelete="SET NULL"), nullable=True)
    base_id: Mapped[int | None] = mapped_column(ForeignKey("environments.id"), nullable=True)
    path: Mapped[str | None] = mapped_column(Text, nullable=True)  # the environment's prefix ($VIRTUAL_ENV)
    image: Mapped[str | None] = mapped_column(Text, nullable=True)
    requirements: Mapped[str] = mapped_column(Text, default="")
    state: Mapped[str] = mapped_column(String(16))  # BUILDING | READY | FAILED
    build_job_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    message: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)  # built or failed

    owner: Mapped[UserRow] = relationship(lazy="joined")
    group: Mapped[GroupRow | None] = relationship(lazy="joined")


class DevSessionRow(Base):
    """A job that is an interactive JupyterLab session (``yard dev``): its lifetime in
    ``hours``, when it ends (``expires_at``: set when the session starts, moved by each
    renewal; the controller stops it then), and JupyterLab's own report of its activity as
    the controller last read it."""

    __tablename__ = "dev_sessions"
    __table_args__ = (Index("ix_dev_sessions_expires_at", "expires_at"),)

    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"), primary_key=True)
    hours: Mapped[float] = mapped_column()
    renewals: Mapped[int] = mapped_column(Integer, default=0)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    last_activity: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    kernels: Mapped[int | None] = mapped_column(Integer, nullable=True)
    connections: Mapped[int | None] = mapped_column(Integer, nullable=True)
    checked_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    # When the current idle spell was reported as an event (None: not idle, or not yet said).
    idle_reported_at: Mapped[datetime | None] = mapped_column(UTCDateTime, nullable=True)
    check_error: Mapped[str] = mapped_column(Text, default="")  # why the last read failed, if it did

    job: Mapped[JobRow] = relationship(lazy="joined")


class IdempotencyKeyRow(Base):
    """A submit made with an ``Idempotency-Key`` (``services.idempotency``): the job it made
    and its first answer, kept so that a retry with the same key gets that answer again
    instead of a second job. One per user and key: the unique constraint is what makes two
    concurrent retries make one job. Rows older than ``idempotency_key_hours`` are forgotten."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (
        UniqueConstraint("user_id", "key", name="uq_idempotency_keys_user_key"),
        Index("ix_idempotency_keys_created_at", "created_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    key: Mapped[str] = mapped_column(String(255))
    # SHA-256 of the request (method, path, its parameters, media type and body): the same key
    # with another request is refused, not answered with this one's job.
    fingerprint: Mapped[str] = mapped_column(String(64))
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"))
    status: Mapped[int] = mapped_column(Integer)  # the first answer's status code
    response: Mapped[str] = mapped_column(Text)  # and its JSON body
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class SweepRow(Base):
    """A sweep (``spec/sweeps.py``): the jobs one submit made from a grid or list of
    parameters, followed, stopped and cloned as one. ``spec`` is the job file as submitted,
    its ``sweep`` section included (secrets too: it is never shown unmasked)."""

    __tablename__ = "sweeps"
    __table_args__ = (Index("ix_sweeps_user_id_id", "user_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id"))
    name: Mapped[str] = mapped_column(String(255))
    spec: Mapped[dict[str, Any]] = mapped_column(JSON)
    parallel: Mapped[int | None] = mapped_column(Integer, nullable=True)  # members running at once
    metric: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)  # {pattern: …} or {name: …}
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)

    user: Mapped[UserRow] = relationship(lazy="joined")
    members: Mapped[list[SweepMemberRow]] = relationship(
        back_populates="sweep", order_by="SweepMemberRow.index", cascade="all, delete-orphan"
    )


class SweepMemberRow(Base):
    """One job of a sweep: its index and its point (the parameters it overrides)."""

    __tablename__ = "sweep_members"
    __table_args__ = (UniqueConstraint("sweep_id", "index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sweep_id: Mapped[int] = mapped_column(ForeignKey("sweeps.id", ondelete="CASCADE"))
    index: Mapped[int] = mapped_column(Integer)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), unique=True)
    params: Mapped[dict[str, Any]] = mapped_column(JSON)

    sweep: Mapped[SweepRow] = relationship(back_populates="members")
    job: Mapped[JobRow] = relationship(lazy="joined")


class WorkdirRow(Base):
    """A working directory its owner uploaded (``core.workdirs``): the archive is one file per
    ``digest``, whoever sent it; this row is what makes it this owner's to run jobs in."""

    __tablename__ = "workdirs"
    __table_args__ = (UniqueConstraint("owner_id", "digest"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    digest: Mapped[str] = mapped_column(String(71), index=True)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    files: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
