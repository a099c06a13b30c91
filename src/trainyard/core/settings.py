"""The one settings object: environment (``TRAINYARD_*``) over ``$TRAINYARD_HOME/config.yaml``."""

from __future__ import annotations

import difflib
import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from trainyard.core.retention import DEFAULT_MONITOR_RETENTION, RetentionTier, parse_retention
from trainyard.spec.storages import DEFAULT_MOUNT_ROOTS, check_mount_root

# A week: long enough to fetch a finished job's checkpoints and results from its directory.
DEFAULT_JOB_DIR_RETENTION_SECONDS = 7 * 24 * 3600.0
DEFAULT_MONITOR_INTERVAL_SECONDS = 10.0
DEFAULT_USAGE_DAYS_KEEP_DAYS = 400  # a year of usage reports, and a month to spare
# Sizes a user controls (issue 27): a job file is at most 1 MiB, and renders to at most this
# per task role; a task's log; its processes and threads; one user's waiting jobs.
DEFAULT_JOB_RENDERED_MAX_KB = 1024
DEFAULT_TASK_LOG_MAX_MB = 1024
DEFAULT_TASK_PIDS_MAX = 4096
DEFAULT_MAX_WAITING_JOBS_PER_USER = 1000
DEFAULT_IDEMPOTENCY_KEY_HOURS = 24.0  # as Stripe keeps its keys


def default_home() -> Path:
    return Path("~/.trainyard").expanduser()


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TRAINYARD_", extra="forbid")

    home: Path = Field(
        default_factory=default_home,
        description="State directory: the database (SQLite by default), client.json (the admin's token), "
        "config.yaml, task state and logs",
    )
    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL; default: SQLite at $TRAINYARD_HOME/trainyard.db"
    )
    database_pool_size: int = Field(
        default=10, ge=1, le=1000,
        description="Database connections the server keeps open; with database_pool_overflow, the most it opens "
        "at once (PostgreSQL allows 100 by default, for every client together)",
    )
    database_pool_overflow: int = Field(
        default=50, ge=0, le=1000,
        description="Database connections the server may open beyond database_pool_size under a burst; a request "
        "that finds none free for 30 s is answered 503 with Retry-After",
    )
    host: str = Field(default="127.0.0.1", description="Address yard up listens on (--host)")
    port: int = Field(default=8642, description="Port yard up listens on (--port): the API, the portal, /metrics")
    local_gpus: int | None = Field(
        default=None, ge=0, description="Expose N simulated GPU slots instead of real NVIDIA GPUs"
    )
    local_gpu_model: str = Field(
        default="V100",
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="The GPU model simulated slots are named as (their being simulated is shown apart)",
    )
    local_cpus: float | None = Field(default=None, gt=0, description="CPUs offered (default: all)")
    local_memory_mb: int | None = Field(default=None, gt=0, description="Memory offered (default: all)")
    task_user: str | None = Field(
        default=None,
        description="Run every task as this OS user (the server must run as root); without it, "
        "tasks run as the server's own user and can read $TRAINYARD_HOME",
    )
    task_work_dir: Path | None = Field(
        default=None,
        description="Where tasks' working directories go, in <task_work_dir>/<cluster id> so that servers never "
        "share one (default: inside $TRAINYARD_HOME's task state, or /var/lib/trainyard/work/<cluster id> when "
        "tasks run under task accounts)",
    )
    task_accounts: Literal["auto", "per-user", "server"] = Field(
        default="auto",
        description="Whose OS account runs a task (local backend): per-user (each Trainyard user's own, "
        "created as ty-<name> on first use; needs root), server (the account running yard up); "
        "auto: per-user as root, else server. task_user overrides it with one shared account",
    )
    task_account_map: dict[str, str] = Field(
        default_factory=dict,
        description="Per-user accounts: existing OS accounts for given Trainyard users, e.g. {alice: alice}",
    )
    task_account_create: bool = Field(
        default=True, description="Per-user accounts: create ty-<name> accounts for users the map does not name"
    )
    task_sandbox: Literal["auto", "bwrap", "none"] = Field(
        default="auto",
        description="Per-task bubblewrap sandbox (local backend): auto (when bwrap works here), bwrap "
        "(required), none",
    )
    # Issue 27, exec and the sandbox: user namespaces inside a task's sandbox.
    task_user_namespaces: bool = Field(
        default=False,
        description="Let sandboxed tasks make user namespaces (unshare -U, rootless podman or Chromium's sandbox "
        "inside a task); off, a seccomp filter (as root) or bwrap's --disable-userns keeps them from it",
    )
    task_limits: Literal["auto", "cgroups", "none"] = Field(
        default="auto",
        description="Enforce each task's cpu and memoryMB with cgroups (v1 or v2; local backend): auto "
        "(where cgroups work here; `yard up` says so when they do not), cgroups (required), none",
    )
    gpu_share_enforcement: Literal["auto", "off"] = Field(
        default="auto",
        description="Hold each task given part of a GPU (gpu: 0.25) to its share of the device's memory with "
        "NVIDIA MPS, one daemon per user per node (local backend; on Slurm, with per-user accounts, one per user per "
        "device on each node): auto (where nvidia-cuda-mps-control and an NVIDIA GPU are there; `yard up` and every "
        "such job say so when not), off (shares are bookkeeping only)",
    )
    gpu_share_threads: bool = Field(
        default=False,
        description="With gpu_share_enforcement, also hold each shared task to its share of the device's "
        "compute (MPS active thread percentage: gpu 0.25 gets 25 percent), even when the device is otherwise idle",
    )
    storage_home_root: Path | None = Field(
        default=None,
        description="Give every user a private home storage, <root>/<user> (made 0700 for the task's account on "
        "first use), which jobs mount as storage 'home'; the root must be mounted on every node",
    )
    storage_group_root: Path | None = Field(
        default=None,
        description="Give every group a shared storage, <root>/<group>, which its members' jobs mount as "
        "storage '@group'; the root must be mounted on every node",
    )
    # Storages' mount points (issue 27): where a job's own mountPath may put a storage.
    storage_mount_roots: list[str] = Field(
        default_factory=lambda: list(DEFAULT_MOUNT_ROOTS),
        description="Where a job may mount a storage: a mountPath the job gives must lie under one of these "
        "(a storage without one is mounted at its own path); never a system path (/usr, /etc, /var, ...). "
        "The sandbox makes each one a folder of the task's own, hiding what the host has there",
    )
    task_env: dict[str, str] = Field(
        default_factory=dict,
        description="Site-wide variables every task gets, over the clean base (PATH, HOME, USER, LOGNAME, "
        "SHELL, LANG) and under the job's own env, e.g. {HTTPS_PROXY: http://proxy:3128}; tasks inherit "
        "nothing else from the server's environment",
    )
    monitor_interval_seconds: float = Field(
        default=DEFAULT_MONITOR_INTERVAL_SECONDS, ge=1.0, le=3600.0,
        description="How often the controller samples nodes and running tasks (GPU, CPU, memory, disk, network)",
    )
    alert_interval_seconds: float = Field(
        default=30.0, ge=1.0, le=3600.0,
        description="How often the controller evaluates the alert rules (their thresholds: `yard alerts rules`)",
    )
    alert_webhook_urls: list[str] = Field(
        default_factory=list,
        description="Where firing and resolved alerts are posted, as Alertmanager's webhook JSON (version 4)",
    )
    smtp_host: str | None = Field(default=None, description="E-mail alerts: the SMTP server (unset: no e-mail)")
    smtp_port: int = Field(default=25, ge=1, le=65535, description="E-mail alerts: the SMTP port")
    smtp_from: str = Field(default="trainyard@localhost", description="E-mail alerts: the sender")
    smtp_to: list[str] = Field(default_factory=list, description="E-mail alerts: the recipients")
    smtp_starttls: bool = Field(default=False, description="E-mail alerts: STARTTLS before sending")
    smtp_username: str | None = Field(default=None, description="E-mail alerts: log in as (with smtp_password)")
    smtp_password: str | None = Field(default=None, description="E-mail alerts: the password for smtp_username")
    notify_webhook_allow: list[str] = Field(
        default_factory=list,
        description="Job notices' webhooks may reach only public addresses; these host names, addresses or CIDR "
        "networks (e.g. hooks.internal, 10.1.2.0/24) are allowed too (docs/admin/notifications.md)",
    )
    external_url: str | None = Field(
        default=None,
        description="The address users reach the server at, for the links in job notices and alerts (unset: "
        "http://HOST:PORT)",
    )
    monitor_retention: str = Field(
        default=DEFAULT_MONITOR_RETENTION,
        description="How long the monitoring history is kept, finest first: RESOLUTION:KEEP tiers; the default "
        "keeps raw samples 1 hour, per-minute averages 1 day, per-10-minute averages 30 days (see "
        "docs/architecture.md for the size it takes)",
    )
    usage_days_keep_days: int = Field(
        default=DEFAULT_USAGE_DAYS_KEEP_DAYS, ge=1,
        description="How many days each task's daily usage totals are kept (they outlive the monitoring history, "
        "so that `yard usage` over a year still has its measured figures; one row per task per day)",
    )
    backend: Literal["local", "slurm", "simulated"] = Field(
        default="local", description="What runs tasks: local processes, or a Slurm cluster (SLURM_CONF); "
        "`simulated`: a stand-in for scale tests, nodes that exist only in the server and run nothing "
        "(simulated_nodes)",
    )
    simulated_nodes: int = Field(
        default=100, ge=1, le=100_000,
        description="Simulated backend: how many nodes (sim-0001, ...); each task runs for its job's "
        "TRAINYARD_SIMULATED_SECONDS, else its first `sleep N`, without a process",
    )
    simulated_gpus_per_node: int = Field(default=8, ge=0, le=64, description="Simulated backend: GPUs per node")
    simulated_gpu_model: str = Field(default="A100", min_length=1, max_length=64,
                                     description="Simulated backend: the nodes' GPU model")
    slurm_partition: str | None = Field(
        default=None, description="Slurm backend: the partition whose nodes Trainyard uses and submits to"
    )
    slurm_state_dir: Path | None = Field(
        default=None,
        description="Slurm backend: task files and logs; compute nodes must see it at the same path "
        "(default: $TRAINYARD_HOME/slurm/<cluster id>)",
    )
    container_engine: Literal["podman", "docker"] = Field(
        default="podman",
        description="What runs the tasks of a job that names an image (`image`, `dockerImage`): podman "
        "(Debian's package) or docker; the same flags either way (docs/user/images.md)",
    )
    container_runtime: str | None = Field(
        default="runc", pattern=r"^[A-Za-z0-9_./-]+$",
        description="Podman's OCI runtime (--runtime); runc works on cgroup v1 hybrid hosts where crun fails; "
        "unset: Podman's default",
    )
    slurm_pyxis: bool = Field(
        default=False,
        description="Slurm backend: the cluster has NVIDIA's Pyxis plugin; tasks with an image run with "
        "`srun --container-image` instead of an engine started inside the job step (not with per-user "
        "task accounts: Pyxis runs the step as the submitter, root)",
    )
    schedule_interval_seconds: float = Field(
        default=0.5, gt=0, description="Longest pause between two controller cycles"
    )
    job_retry_backoff_seconds: float = Field(
        default=10.0,
        ge=0,
        le=3600,
        description="A job whose attempt failed or was lost waits this long before its next (its reason RETRY), "
        "twice as long after each further one, at most 5 minutes (Kubernetes' crash-loop back-off); 0: at once",
    )
    scheduler_worker: bool = Field(
        default=True,
        description="Compute each scheduling cycle in a worker process of its own, off the interpreter the "
        "API's requests need (a second core busy while the queue is long); false: in the server's process, "
        "the controller then spacing its cycles out further under a burst of submits",
    )
    # None: the scheduler's own default (``scheduler.snapshot.DEFAULT_SCORER``), so that the
    # controller and the simulator never differ and core needs no name from the scheduler.
    scheduler_scorer: str | None = Field(
        default=None,
        description="Placement scorer; unset: the scheduler's default (FGD's fragmentation cost plus GPUs "
        "stranded without CPU; a task's GPUs in one PCIe/NUMA group, a gang on few nodes in one rack; see "
        "docs/scheduling.md). Others: topology (the topology rules with best fit), bestfit, fgd, or a "
        "baseline of the FGD paper",
    )
    scheduler_backfill: bool = Field(
        default=True, description="EASY backfill: small jobs fill idle GPUs around the first waiting job's reservation"
    )
    backfill_drain_after_seconds: float = Field(
        default=300.0,
        ge=0,
        description="A reservation that waits for jobs without maxRunTimeSeconds holds GPUs only "
        "once its job has waited this long",
    )
    scheduler_timeshare: bool = Field(
        default=True,
        description="Time-sharing: within a VC and a priority, jobs that declare they can be suspended take "
        "turns, least attained service first (docs/scheduling.md); no effect on jobs that cannot",
    )
    # None: the scheduler's own default (``SchedulerConfig.time_slice``), as for the scorer.
    scheduler_time_slice_seconds: float | None = Field(
        default=None,
        ge=0,
        description="Time-sharing's minimum time slice: a job is suspended for another's turn no sooner than "
        "this long after it (re)started; unset: the scheduler's default (1800 s)",
    )
    scheduler_max_starts_per_cycle: int = Field(
        default=500,
        ge=0,
        description="At most this many jobs started per scheduling cycle (as Slurm's sched_max_job_start): "
        "a cycle that reaches it stops there, tells the jobs it did not try so, and the next cycle runs at "
        "once; it bounds a cycle's time when a burst of jobs can start. 0: no bound (docs/scheduling.md)",
    )
    scheduler_elastic_grow_interval_seconds: float = Field(
        default=60.0,
        ge=0,
        allow_inf_nan=False,
        description="An elastic job grows into idle GPUs no sooner than this long after its workers last "
        "(re)started (its start or a resize, each of which restarts every worker), so that GPUs free for a "
        "moment do not restart it twice; shrinking is never held back. 0: grow at once (docs/scheduling.md)",
    )
    scheduler_moves_per_hour: int = Field(
        default=0,
        ge=0,
        description="Consolidation: at most this many suspendable jobs moved an hour (suspended to resume at "
        "once on GPUs free elsewhere) so that a gang no node has room for finds a node; never another VC's "
        "guaranteed work, a higher priority, or a job that ran less than half an hour since it last (re)started. "
        "0: off (docs/scheduling.md)",
    )
    scheduler_moves_per_cycle: int = Field(
        default=4, ge=0, description="Consolidation: at most this many jobs moved in one scheduling cycle"
    )
    scheduler_borrowing: bool = Field(
        default=True,
        description="Borrowing: a job of any priority over its VC's quota may run on other VCs' idle guaranteed "
        "GPUs, as borrowed work reclaimed (suspended where it can be, else requeued) when they need them back; "
        "per-VC limits and weights with `yard vc borrowing` (docs/scheduling.md)",
    )
    scheduler_borrow_within_vcs: Literal["never", "lower-priority"] = Field(
        default="never",
        description="As Kueue's borrowWithinCohort: lower-priority: a job over its VC's quota may also reclaim "
        "other VCs' borrowed work of lower priority at once (never: only by fair share, after a time slice); "
        "another VC's guaranteed work is never taken (docs/scheduling.md)",
    )
    scheduler_reservation_holds: Literal["after-drain", "lower-priority"] = Field(
        default="after-drain",
        description="lower-priority: the first waiting job's reservation holds GPUs against jobs of lower "
        "priority at once, and against the rest after backfill_drain_after_seconds (after-drain: against all, "
        "only then) (docs/scheduling.md)",
    )
    scheduler_fair_share_half_life_seconds: float = Field(
        default=7 * 24 * 3600.0,
        ge=0,
        allow_inf_nan=False,
        description="Fair share: among jobs of one VC and priority, users with less recent GPU usage go first, "
        "usage decaying with this half-life (default 7 days); 0 turns fair share off (submission order)",
    )
    local_gpu_groups: list[list[int]] | None = Field(
        default=None,
        description="GPU indices per PCIe/NUMA group, e.g. [[0,1,2,3],[4,5,6,7]]; default: NUMA nodes from NVML",
    )
    job_dir_retention_seconds: float = Field(
        default=DEFAULT_JOB_DIR_RETENTION_SECONDS,
        ge=0,
        description="How long a job's directory ($TRAINYARD_JOB_DIR) is kept after the job has ended "
        "(default 7 days); then the controller removes it, with its tasks' working directories (their logs stay)",
    )
    dataset_cache_dir: Path | None = Field(
        default=None,
        description="Where each node keeps its dataset cache (issue 35): a folder on the node's own fast disk, "
        "root's alone (tasks see only the entries they mount, read-only); default on the local backend: datasets/ "
        "in its state folder under $TRAINYARD_HOME/local; on Slurm each node's cache is <this>/<node> (default, "
        "with the server run as root: /var/cache/trainyard/datasets/<node>, on the node's own disk; else "
        "<slurm_state_dir>/datasets/cache/<node>, on the shared state directory, which yard doctor warns of)",
    )
    dataset_cache_gb: float = Field(
        default=100, gt=0,
        description="The most a node's dataset cache holds, in GiB: past it, the least recently used datasets no "
        "running task mounts are removed; a dataset bigger than this is refused when it is fetched",
    )
    dataset_fetch_timeout_s: float = Field(
        default=6 * 3600.0, gt=0,
        description="How long a node may take to fetch one dataset, in seconds, however slowly its source answers: "
        "past it the fetch fails and the task with it, saying so (a source that trickles holds no task for ever)",
    )
    dataset_allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Hosts (names or IP addresses, as a dataset URL names them) that a dataset's URL may name even "
        "though they resolve to a loopback, link-local or the server's or node's own address, e.g. a mirror on the "
        "server's host; every other such URL is refused at registration and at every fetch and redirect (root "
        "fetches datasets on the nodes: a URL must not reach the server's API, its database or cloud metadata)",
    )
    environments_root: Path | None = Field(
        default=None,
        description="Where `yard env create` builds custom environments, as <root>/<owner>/<name>: a folder every "
        "node sees at the same path (default on the local backend: <cluster id>-environments beside the task work "
        "dirs' root when tasks run under task accounts, else in $TRAINYARD_HOME/local; on Slurm: "
        "<slurm_state_dir>/environments)",
    )
    session_python: Path | None = Field(
        default=None,
        description="Interactive sessions (`yard dev`): the Python, with JupyterLab, that runs a session naming no "
        "environment or image, at this path on every node (default: the Python running yard up, if JupyterLab "
        "is installed there)",
    )
    session_hours: float = Field(
        default=24.0, gt=0, le=8760,
        description="Interactive sessions: the lifetime of a session that asks for none; it is stopped then "
        "unless renewed (`yard dev renew`)",
    )
    session_max_hours: float = Field(
        default=168.0, gt=0, le=8760,
        description="Interactive sessions: the longest lifetime one start or one renewal may ask for",
    )
    session_idle_report_minutes: float = Field(
        default=60.0, gt=0,
        description="Interactive sessions: a session with no activity for this long is reported idle "
        "(an event on it; `yard dev list` and the portal show it)",
    )
    session_idle_cull_minutes: float | None = Field(
        default=None, gt=0,
        description="Interactive sessions: stop a session with no activity for this long (unset: never)",
    )
    session_check_interval_seconds: float = Field(
        default=60.0, ge=1.0, le=3600.0,
        description="Interactive sessions: how often the controller reads each running session's activity",
    )
    session_admin_access: bool = Field(
        default=False,
        description="Interactive sessions: admins may open other users' sessions too (with a token, as for "
        "the job-port proxy); by default only a session's owner can",
    )
    # Sizes a user controls (issue 27, finding 7): each bounded, so that one user cannot fill
    # the machine's disk, memory or process table (docs/security.md, "Sizes a user controls").
    job_rendered_max_kb: int = Field(
        default=DEFAULT_JOB_RENDERED_MAX_KB, ge=1, le=1024 * 1024,
        description="The most one task role of a job may render to, in KiB: its commands (deployment hooks "
        "included) and env values with every placeholder filled in; refused at submit and dry run, at the field",
    )
    task_log_max_mb: int | None = Field(
        default=DEFAULT_TASK_LOG_MAX_MB, ge=1,
        description="The most output one task may write to its log (output.log), in MiB; further output is "
        "dropped (the log's last line and the task's message say so); unset: no cap",
    )
    task_log_cap_stop: bool = Field(
        default=False,
        description="Stop a task (SIGKILL, failed) whose log reaches task_log_max_mb, instead of dropping "
        "its further output while it runs on",
    )
    task_pids_max: int | None = Field(
        default=DEFAULT_TASK_PIDS_MAX, ge=8,
        description="The most processes and threads one task may have at once (its cgroup's pids.max; podman "
        "--pids-limit); a fork past it fails with EAGAIN; unset: no limit",
    )
    job_dir_max_mb: int | None = Field(
        default=None, ge=1,
        description="The most disk a job's directory ($TRAINYARD_JOB_DIR) may use, in MiB; a running job "
        "whose directory is found larger is stopped with a message saying so; unset: no cap (its use is "
        "shown by `yard job` either way)",
    )
    workdir_max_mb: int = Field(
        default=64, ge=1, le=4096,
        description="The most a job's working directory (the project folder `yard submit` sends) may hold, "
        "in MiB of files unpacked; a bigger one is refused at submit, naming its biggest files. Uploads are "
        "kept under <home>/workdirs, once per content",
    )
    workdir_user_max_mb: int = Field(
        default=1024, ge=1,
        description="What one user's uploaded working directories may hold together, in MiB; an upload past it "
        "is refused (429). One goes a day after it was sent if no job runs in it, and a week after the last job "
        "in it ended",
    )
    max_waiting_jobs_per_user: int | None = Field(
        default=DEFAULT_MAX_WAITING_JOBS_PER_USER, ge=1,
        description="The most jobs one user may have waiting at once; a submit past it is refused (429); "
        "unset: no limit",
    )
    # -- Idempotent submits (issue 27, finding 9): POST /jobs' Idempotency-Key ----------------
    idempotency_key_hours: float = Field(
        default=DEFAULT_IDEMPOTENCY_KEY_HOURS, gt=0, le=8760,
        description="How long a submit's Idempotency-Key is kept: a retry with the same key within this time "
        "gets the first answer (the same job) again; after it, the key may make a new job",
    )
    # -- end of idempotent submits ------------------------------------------------------------
    # -- Signing in and revocation (docs/security.md "Signing in, and what ends it") --
    trusted_proxies: list[str] = Field(
        default_factory=list,
        description="Addresses or networks (e.g. 10.0.0.5, 10.1.0.0/16) of the reverse proxies in front of yard "
        "up whose X-Forwarded-For and X-Forwarded-Proto are believed; from anyone else (127.0.0.1, where every "
        "job on the node connects from, included) they are ignored. Default: none",
    )
    sign_in_failures: int = Field(
        default=5, ge=1, le=1000,
        description="The portal's sign-in: tries allowed per user name and per client address in a window "
        "(sign_in_window_seconds) before the next must wait",
    )
    sign_in_window_seconds: float = Field(
        default=300.0, ge=1.0, le=86400.0,
        description="The portal's sign-in: how long a window of counted tries lasts, from its first",
    )
    rack_label: str = Field(default="rack", description="The node label that names a node's rack")
    node_labels: dict[str, str] = Field(
        default_factory=dict, description="Labels of this machine's node (local backend), e.g. {rack: r1}"
    )

    @field_validator("storage_mount_roots")
    @classmethod
    def _check_mount_roots(cls, value: list[str]) -> list[str]:
        roots = [check_mount_root(root) for root in value]
        return list(dict.fromkeys(roots))
    @field_validator("trusted_proxies")
    @classmethod
    def _check_proxies(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                ipaddress.ip_network(item.strip(), strict=False)
            except ValueError:
                raise ValueError(f"trusted_proxies: {item!r} is not an IP address or network "
                                 "(e.g. 10.0.0.5 or 10.1.0.0/16)") from None
        return [item.strip() for item in value]

    @field_validator("monitor_retention")
    @classmethod
    def _check_retention(cls, value: str) -> str:
        parse_retention(value)
        return value

    @property
    def retention(self) -> tuple[RetentionTier, ...]:
        return parse_retention(self.monitor_retention)

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'trainyard.db'}"

    @property
    def client_file(self) -> Path:
        return self.home / "client.json"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _ConfigFile(settings_cls))


class _ConfigFile(PydanticBaseSettingsSource):
    """Reads ``$TRAINYARD_HOME/config.yaml`` (keys as the field names) when present."""

    def __call__(self) -> dict[str, Any]:
        home = Path(os.environ.get("TRAINYARD_HOME") or default_home())
        path = home / "config.yaml"
        if not path.is_file():
            return {}
        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping of setting names to values")
        return data

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False


# What else is spelled TRAINYARD_*: the CLI's and the tests' variables and the ones a task is
# given (tests/core/test_settings_environment.py checks that every such name in the code is here
# or a setting, so that a task's own variables never read as a misspelled setting).
NOT_SETTINGS = (
    "TRAINYARD_URL", "TRAINYARD_TOKEN", "TRAINYARD_TEST", "TRAINYARD_REQUIRE_", "TRAINYARD_CHROMIUM",
    "TRAINYARD_TRACES", "TRAINYARD_JOB_ID", "TRAINYARD_JOB_NAME", "TRAINYARD_JOB_DIR", "TRAINYARD_TASK_ROLE",
    "TRAINYARD_TASK_INDEX", "TRAINYARD_TASK_RUN", "TRAINYARD_ATTEMPT", "TRAINYARD_NODE", "TRAINYARD_HOSTFILE",
    "TRAINYARD_DATASET_", "TRAINYARD_STORAGE_", "TRAINYARD_ELASTIC_MIN", "TRAINYARD_ELASTIC_MAX",
    "TRAINYARD_ELASTIC_RESIZES", "TRAINYARD_ENV_NAME", "TRAINYARD_ENV_PREFIX", "TRAINYARD_ENV_REQUIREMENTS",
    "TRAINYARD_EXEC", "TRAINYARD_MPI_HOSTS", "TRAINYARD_NNODES", "TRAINYARD_RDZV_", "TRAINYARD_RESUMED",
    "TRAINYARD_SECRETS_DIR", "TRAINYARD_SIMULATED_EXIT", "TRAINYARD_SIMULATED_SECONDS",
    "TRAINYARD_SIMULATE_SUSPEND_AFTER", "TRAINYARD_SIMULATE_SUSPENSIONS", "TRAINYARD_SUSPEND_FILE",
    "TRAINYARD_SUSPEND_SIGNAL", "TRAINYARD_SWEEP_ID", "TRAINYARD_SWEEP_INDEX", "TRAINYARD_SWEEP_PARAMS",
    "TRAINYARD_TORCHRUN", "TRAINYARD_WORKDIR_ARCHIVE",
)


def misspelled_environment(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """``TRAINYARD_*`` variables that name no setting but nearly spell one, with that one:
    pydantic-settings ignores an unknown variable, so a misspelled setting would do nothing,
    silently. Only near misses are said: the same prefix also carries the CLI's variables
    (``TRAINYARD_URL``, ``TRAINYARD_TOKEN``) and the ones Trainyard gives its tasks."""
    known = {f"TRAINYARD_{name.upper()}" for name in Settings.model_fields}
    found = []
    for name in sorted(environ):
        if name.startswith("TRAINYARD_") and name not in known and not name.startswith(NOT_SETTINGS):
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.85)
            if close:
                found.append((name, close[0]))
    return found

