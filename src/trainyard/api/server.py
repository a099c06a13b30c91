"""``yard up``: assemble store, backend, controller and API, and serve until interrupted.

Stopping the server (Ctrl-C, SIGTERM, even ``kill -9``) never stops the jobs: local tasks
run under their own supervisors and are re-adopted on the next start. Ctrl-C or SIGTERM
stops it within a second or two: open log followers (``yard logs -f``) are ended first, so
that they do not hold it up, and whatever request is still open after
``GRACEFUL_SHUTDOWN_SECONDS`` is cut.
"""

from __future__ import annotations

import fcntl
import gc
import getpass
import importlib.util
import json
import logging
import os
import signal
import socket
import stat
import sys
import threading
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import IO

import uvicorn

from trainyard.api.app import create_app
from trainyard.backends.base import Backend
from trainyard.backends.containers import NO_CDI, ContainerEngine
from trainyard.backends.environment import process_account
from trainyard.backends.local.backend import LocalBackend
from trainyard.backends.local.gpus import simulated_gpus
from trainyard.backends.local.isolation import TaskIsolation, plan_isolation
from trainyard.backends.sandbox import Sandbox, find_sandbox
from trainyard.backends.simulated import SimulatedBackend
from trainyard.backends.slurm.backend import SlurmBackend
from trainyard.backends.slurm.commands import SlurmError
from trainyard.backends.slurm.sandboxing import isolation_summary as slurm_isolation_summary
from trainyard.backends.slurm.shares import summary as slurm_share_summary
from trainyard.backends.taskaccounts import TaskAccounts
from trainyard.controller.alerting import Receivers
from trainyard.controller.loop import REASON_REFRESH_SECONDS, Controller
from trainyard.core.clock import SystemClock
from trainyard.core.sessions import SessionPolicy
from trainyard.core.settings import Settings
from trainyard.monitor.notify import SmtpSettings
from trainyard.scheduler.scorers.registry import SCORERS
from trainyard.scheduler.snapshot import DEFAULT_SCORER, SchedulerConfig
from trainyard.services.auth import bootstrap_admin
from trainyard.services.jobs import SubmitLimits
from trainyard.services.storages import set_builtin_roots, set_mount_roots
from trainyard.services.workdirs import WorkdirStore
from trainyard.store.db import Database
from trainyard.store.meta import cluster_id
from trainyard.web.context import AppContext

log = logging.getLogger("trainyard")

GRACEFUL_SHUTDOWN_SECONDS = 2  # uvicorn takes whole seconds


class ClosingServer(uvicorn.Server):
    """uvicorn's server that, as it begins shutting down, sets ``closing``: the event that ends
    the app's streaming responses. uvicorn itself waits for every open response to finish,
    and a log follower's would only finish when its task ends."""

    def __init__(self, config: uvicorn.Config, closing: threading.Event) -> None:
        super().__init__(config)
        self.closing = closing

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # uvicorn takes a second Ctrl-C as "quit now", skipping the app's own shutdown and
        # leaving its tasks to be torn down with tracebacks. Shutting down is bounded here
        # (followers end at once, anything else is cut after GRACEFUL_SHUTDOWN_SECONDS), so
        # a second signal only says so.
        if self.should_exit:
            log.warning("already stopping; open requests are cut within %d s", GRACEFUL_SHUTDOWN_SECONDS)
            return
        log.info("%s: stopping the server; jobs keep running and are adopted at the next start",
                 signal.Signals(sig).name)
        super().handle_exit(sig, frame)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # Set before uvicorn stops listening, which it does before its first await: a follower
        # wakes only after that, so its client finds the server gone, not a new one to ask.
        self.closing.set()
        await super().shutdown(sockets)


class StartupError(Exception):
    """Something the admin must fix before the server can start."""


def write_client_file(path: Path, url: str, token: str | None) -> None:
    """Write (or update the URL of) the local client file, readable by its owner only."""
    data: dict[str, str] = {}
    if path.exists():
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError:
            data = {}
    data["url"] = url
    if token is not None:
        data["token"] = token
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
    os.replace(tmp, path)


def bind_listener(host: str, port: int) -> socket.socket:
    """The server's socket, bound now and served as it is (no window in which another
    process could take the port). Port 0 asks the kernel for a free one: the server then
    serves, and writes to client.json, the port it got."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise StartupError(
            f"cannot listen on {host}:{port}: {exc.strerror}; is another `yard up` running? "
            "Choose another port with --port."
        ) from exc
    return sock


def prepare_home(settings: Settings) -> None:
    """Create ``$TRAINYARD_HOME`` private to the server: it holds the token and the store."""
    settings.home.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(settings.home, 0o700)
    if settings.database_url is None:
        db_file = settings.home / "trainyard.db"
        if not db_file.exists():
            os.close(os.open(db_file, os.O_CREAT | os.O_WRONLY, 0o600))


def hold_home(home: Path, url: str) -> IO[str]:
    """Lock ``$TRAINYARD_HOME`` for this server's lifetime (the lock goes with the returned
    file): a second ``yard up`` on the same home would schedule the same store twice and
    point client.json at itself."""
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = open(home / "yard-up.lock", "a+")  # held open while serving
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "another process"
        lock.close()
        raise StartupError(
            f"another `yard up` serves {home} ({holder}); stop it first, or give this one its own "
            "TRAINYARD_HOME"
        ) from None
    note_holder(lock, url)
    return lock


def note_holder(lock: IO[str], url: str) -> None:
    """Say in the held lock file who holds it, for a second ``yard up``'s refusal."""
    lock.seek(0)
    lock.truncate()
    lock.write(f"pid {os.getpid()}, {url}\n")
    lock.flush()


def scheduler_config(settings: Settings) -> SchedulerConfig:
    scorer = settings.scheduler_scorer or DEFAULT_SCORER
    if scorer not in SCORERS:
        raise SystemExit(f"unknown scheduler_scorer {scorer!r}; use one of {', '.join(sorted(SCORERS))}")
    config = SchedulerConfig(
        scorer=scorer,
        backfill=settings.scheduler_backfill,
        drain_after=settings.backfill_drain_after_seconds,
        rack_label=settings.rack_label,
        timeshare=settings.scheduler_timeshare,
        borrowing=settings.scheduler_borrowing,
        fair_share_half_life=settings.scheduler_fair_share_half_life_seconds,
        max_starts=settings.scheduler_max_starts_per_cycle,
        grow_interval=settings.scheduler_elastic_grow_interval_seconds,
        moves_per_hour=settings.scheduler_moves_per_hour,
        moves_per_cycle=settings.scheduler_moves_per_cycle,
        borrow_within_vcs=settings.scheduler_borrow_within_vcs == "lower-priority",
        reserve_at_once=settings.scheduler_reservation_holds == "lower-priority",
    )
    if settings.scheduler_time_slice_seconds is not None:
        config = replace(config, time_slice=settings.scheduler_time_slice_seconds)
    return config


def build_backend(settings: Settings, cluster: str) -> Backend:
    if settings.backend == "simulated":
        log.warning("backend simulated: %d nodes of %d %s GPUs that exist only in this server, for scale tests; "
                    "no task runs anywhere", settings.simulated_nodes, settings.simulated_gpus_per_node,
                    settings.simulated_gpu_model)
        return SimulatedBackend(settings.simulated_nodes, settings.simulated_gpus_per_node,
                                gpu_model=settings.simulated_gpu_model)
    if settings.backend == "slurm":
        state_dir = settings.slurm_state_dir or settings.home / "slurm" / cluster
        accounts, sandbox, why_not = slurm_isolation(settings)
        # Said once, at start-up: what a job can and cannot reach on this install.
        summary = slurm_isolation_summary(state_dir, process_account()[1], isolated=accounts is not None,
                                          why_not=why_not)
        (log.info if accounts is not None else log.warning)("%s", summary)
        try:
            slurm = SlurmBackend(state_dir, accounts=accounts, sandbox=sandbox,
                                partition=settings.slurm_partition, site_env=settings.task_env,
                                sample_interval_seconds=settings.monitor_interval_seconds,
                                containers=ContainerEngine.find(settings.container_engine,
                                                                settings.container_runtime),
                                pyxis=settings.slurm_pyxis,
                                environments_root=settings.environments_root,
                                dataset_cache=(settings.dataset_cache_dir, int(settings.dataset_cache_gb * (1 << 30))),
                                dataset_sources=(settings.dataset_fetch_timeout_s,
                                                 tuple(settings.dataset_allowed_hosts)),
                                gpu_shares=(settings.gpu_share_enforcement, settings.gpu_share_threads))
        except (SlurmError, ValueError) as exc:  # Slurm's answer, or settings that cannot go together
            raise StartupError(str(exc)) from exc
        # Whether fractions of a GPU are held to their share on the nodes (issue 36).
        (log.warning if slurm.gpu_share_note else log.info)("%s", slurm_share_summary(
            slurm.gpu_share_note, slurm.mps_root, slurm.gpu_share_threads))
        return slurm
    isolation = task_isolation(settings, cluster)
    # Said once, at start-up: what a job can and cannot reach on this install.
    (log.warning if isolation.weak else log.info)("%s", isolation.summary)
    try:
        backend = LocalBackend(
            settings.home / "local" / cluster,
            # --local-gpus asks for simulated slots; without it, NVML finds the real GPUs.
            gpus=None if settings.local_gpus is None else simulated_gpus(settings.local_gpus, settings.local_gpu_model),
            cpu_milli=round(settings.local_cpus * 1000) if settings.local_cpus else None,
            memory_mb=settings.local_memory_mb,
            run_as=isolation.run_as,
            accounts=isolation.accounts,
            sandbox=isolation.sandbox,
            work_dir_root=isolation.work_dir_root,
            labels=settings.node_labels,
            gpu_groups=settings.local_gpu_groups,
            site_env=settings.task_env,
            task_limits=settings.task_limits,
            containers=ContainerEngine.find(settings.container_engine, settings.container_runtime),
            environments_root=settings.environments_root,
            pids_max=settings.task_pids_max,
            log_max_bytes=None if settings.task_log_max_mb is None else settings.task_log_max_mb << 20,
            log_cap_stop=settings.task_log_cap_stop,
            dataset_cache=(settings.dataset_cache_dir, int(settings.dataset_cache_gb * (1 << 30))),
            dataset_sources=(settings.dataset_fetch_timeout_s, tuple(settings.dataset_allowed_hosts)),
            gpu_shares=(settings.gpu_share_enforcement, settings.gpu_share_threads),
        )
        backend.check_host()
    except RuntimeError as exc:  # no bash, supervisors cannot start, or required limits cannot be: nothing could run
        raise StartupError(str(exc)) from exc
    log_container_support(backend)
    log_gpu_shares(backend)
    return backend


def slurm_isolation(settings: Settings) -> tuple[TaskAccounts | None, Sandbox | None, str]:
    """Per-user accounts and the sandbox for the Slurm backend (both or neither: the sandbox,
    entered as root on the node, drops to the account), and why not when neither. The
    sandbox is probed here, on the server: the nodes must have bubblewrap at the same path."""
    if settings.task_user is not None:
        raise StartupError("task_user (one shared account) is for the local backend; on Slurm each user's tasks"
                           " run as their own account (task_accounts)")
    if settings.task_accounts == "server" or (settings.task_accounts == "auto" and os.geteuid() != 0):
        if settings.task_sandbox == "bwrap":
            raise StartupError("task_sandbox=bwrap on Slurm needs per-user accounts (yard up as root)")
        return None, None, "task_accounts=server" if settings.task_accounts == "server" else "yard up is not root"
    if os.geteuid() != 0:
        raise StartupError("task_accounts=per-user needs `yard up` to run as root: it runs each task as its"
                           " owner's account on the nodes")
    if settings.task_sandbox == "none":
        if settings.task_accounts == "per-user":
            raise StartupError("on Slurm, per-user accounts need the task sandbox (task_sandbox=auto or bwrap)")
        return None, None, "task_sandbox=none"
    try:
        sandbox, why = find_sandbox(settings.task_sandbox, hidden=[settings.home.absolute()], as_root=True,
                                    allow_userns=settings.task_user_namespaces)
        if sandbox is None:
            if settings.task_accounts == "per-user":
                raise StartupError(f"task_accounts=per-user on Slurm needs bubblewrap: {why}")
            return None, None, why
        return TaskAccounts(settings.task_account_map, create=settings.task_account_create), sandbox, ""
    except ValueError as exc:
        raise StartupError(str(exc)) from exc


def log_gpu_shares(backend: LocalBackend) -> None:
    """Say at start-up, beside the isolation line, whether a task given part of a GPU is held
    to its share (issue 36): a warning where real GPUs could be shared unenforced."""
    real_gpus = any(not g.simulated for g in backend.inventory()[0].gpus)
    (log.warning if real_gpus and not backend.gpu_shares.control else log.info)("%s", backend.gpu_shares.summary)


def log_container_support(backend: LocalBackend) -> None:
    """Say at start-up what jobs with an image get here: no engine, or GPUs without CDI."""
    engine = backend.containers
    if engine is None:
        log.warning("no container engine found: tasks of jobs that name an image will fail "
                    "(install podman, or docker and set container_engine: docker)")
        return
    log.info("tasks of jobs that name an image run in %s containers (%s)", engine.kind, engine.path)
    if any(not g.simulated for g in backend.inventory()[0].gpus) and not backend.cdi_gpus:
        log.warning("%s; until then, a GPU task in a container fails with this message", NO_CDI)


def task_isolation(settings: Settings, cluster: str) -> TaskIsolation:
    """The local backend's accounts and sandbox for these settings (see backends/local/isolation)."""
    try:
        return plan_isolation(
            accounts_mode=settings.task_accounts,
            task_user=settings.task_user,
            sandbox_mode=settings.task_sandbox,
            home=settings.home.absolute(),
            cluster=cluster,
            as_root=os.geteuid() == 0,
            server_user=getpass.getuser(),
            work_dir=settings.task_work_dir,
            account_map=settings.task_account_map,
            create_accounts=settings.task_account_create,
            allow_userns=settings.task_user_namespaces,
        )
    except ValueError as exc:
        raise StartupError(str(exc)) from exc


def build(settings: Settings) -> tuple[AppContext, Controller]:
    config = scheduler_config(settings)  # a bad setting fails before anything is written
    prepare_home(settings)
    clock = SystemClock()
    db = Database(settings.db_url, pool_size=settings.database_pool_size,
                  pool_overflow=settings.database_pool_overflow)
    db.migrate()
    db.checkpoint_in_background()
    with db.session() as session:
        cluster = cluster_id(session)
        try:
            set_builtin_roots(session, home=_text(settings.storage_home_root), group=_text(settings.storage_group_root))
        except ValueError as exc:
            raise StartupError(f"storage_home_root / storage_group_root: {exc}") from exc
        set_mount_roots(session, settings.storage_mount_roots)  # checked by the settings
    backend = build_backend(settings, cluster)
    policy = session_policy(settings, backend)
    workdirs = WorkdirStore(settings.home.absolute() / "workdirs", max_bytes=settings.workdir_max_mb << 20,
                            user_max_bytes=settings.workdir_user_max_mb << 20)
    controller = Controller(
        db, backend, clock, interval=settings.schedule_interval_seconds, config=config,
        job_dir_retention_seconds=settings.job_dir_retention_seconds, monitor_retention=settings.retention,
        monitor_interval_seconds=settings.monitor_interval_seconds, usage_days_keep_days=settings.usage_days_keep_days,
        alert_interval_seconds=settings.alert_interval_seconds, alert_receivers=alert_receivers(settings),
        session_policy=policy,
        job_dir_max_bytes=None if settings.job_dir_max_mb is None else settings.job_dir_max_mb << 20,
        workdirs=workdirs, scheduler_worker=settings.scheduler_worker, reason_refresh_seconds=REASON_REFRESH_SECONDS,
        retry_backoff_seconds=settings.job_retry_backoff_seconds,
    )
    ctx = AppContext(db=db, backend=backend, clock=clock, controller=controller, specs=controller.specs,
                     workdirs=workdirs,
                     job_dir_retention_seconds=settings.job_dir_retention_seconds,
                     monitor_interval_seconds=settings.monitor_interval_seconds,
                     monitor_retention=settings.retention, sessions=policy,
                     fair_share_half_life_seconds=config.fair_share_half_life,
                     submit_limits=SubmitLimits(rendered_max_bytes=settings.job_rendered_max_kb * 1024,
                                                max_waiting_jobs=settings.max_waiting_jobs_per_user,
                                                borrowing=config.borrowing,
                                                webhook_allow=tuple(settings.notify_webhook_allow)),
                     idempotency_key_hours=settings.idempotency_key_hours,
                     dataset_allowed_hosts=tuple(settings.dataset_allowed_hosts),
                     email_notices=settings.smtp_host is not None,
                     sign_in_failures=settings.sign_in_failures,
                     sign_in_window_seconds=settings.sign_in_window_seconds)
    return ctx, controller


def _anyone_can_read(path: Path) -> bool:
    """Whether any account may reach ``path`` (every folder above it searchable by others)
    and read it."""
    try:
        path = path.resolve()
        if not path.stat().st_mode & stat.S_IROTH:
            return False
        return all(parent.stat().st_mode & stat.S_IXOTH for parent in path.parents)
    except OSError:
        return False


def session_policy(settings: Settings, backend: Backend) -> SessionPolicy:
    """Sessions' rules. Their default Python is the site's ``session_python``, else the one
    running ``yard up`` if it has JupyterLab and the accounts tasks run as can run it."""
    python = settings.session_python
    if python is None and (found := importlib.util.find_spec("jupyterlab")) is not None:
        python = Path(sys.executable)
        under_accounts = isinstance(backend, LocalBackend) and backend.work_dir_root is not None
        if under_accounts and not all(_anyone_can_read(p) for p in (python, Path(found.origin or python))):
            log.warning("interactive sessions: %s has JupyterLab, but tasks run under their users' accounts, "
                        "which cannot run it: a session needs --environment or --image, or set "
                        "TRAINYARD_SESSION_PYTHON to a Python with JupyterLab that every account can run", python)
            python = None
    if python is None:
        log.info("interactive sessions: no default Python with JupyterLab (TRAINYARD_SESSION_PYTHON); "
                 "`yard dev` needs --environment or --image with JupyterLab")
    else:
        log.info("interactive sessions: `yard dev` runs JupyterLab with %s unless it names an environment or image",
                 python)
    return SessionPolicy(
        python=None if python is None else str(python), hours=settings.session_hours,
        max_hours=settings.session_max_hours, idle_report_minutes=settings.session_idle_report_minutes,
        idle_cull_minutes=settings.session_idle_cull_minutes,
        check_interval_seconds=settings.session_check_interval_seconds, admin_access=settings.session_admin_access)


def _text(path: Path | None) -> str | None:
    return None if path is None else str(path.absolute())


def alert_receivers(settings: Settings) -> Receivers:
    """Who hears of alerts: the webhooks, and e-mail when an SMTP server is set."""
    smtp = job_smtp = None
    if settings.smtp_host:
        # Job notices go to each owner's own address; alerts to smtp_to, when set.
        job_smtp = SmtpSettings(settings.smtp_host, settings.smtp_port, settings.smtp_from, (),
                                settings.smtp_starttls, settings.smtp_username, settings.smtp_password)
        if settings.smtp_to:
            smtp = replace(job_smtp, recipients=settings.smtp_to)
    external = (settings.external_url or f"http://{settings.host}:{settings.port}").rstrip("/")
    return Receivers(settings.alert_webhook_urls, smtp, external, job_smtp=job_smtp,
                     webhook_allow=tuple(settings.notify_webhook_allow))


# Container objects allocated (less those freed) before a young-generation collection.
YOUNG_OBJECTS = 50_000


def settle_heap() -> None:
    """Put what start-up made (modules, the app, the store's metadata: some 150,000 objects)
    out of the garbage collector's sight, once the server is built.

    A full collection walks every tracked object, and a request that builds tens of
    thousands of objects (``GET /metrics`` for 1,000 nodes) sets one off every few calls:
    with start-up's objects frozen, it walks only the request's (``gc.freeze``; what was
    frozen lives as long as the server anyway). ``benchmarks/bench_metrics_exposition.py``
    measures it.

    It also lets the young generation grow to ``YOUNG_OBJECTS`` before a collection: such a
    scrape makes some 35,000 containers (rows, decoded GPU lists, figures) that all live
    until its page is written, and at the default threshold (700) the collector ran about
    50 times a scrape, promoting them and walking them again: 5-10 ms of its ~90 ms CPU.
    """
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_OBJECTS, older, oldest)


def serve(settings: Settings) -> None:
    lock = hold_home(settings.home, f"http://{settings.host}:{settings.port}")
    try:
        with bind_listener(settings.host, settings.port) as listener:
            if settings.port == 0:  # the port the kernel gave
                settings = settings.model_copy(update={"port": listener.getsockname()[1]})
                note_holder(lock, f"http://{settings.host}:{settings.port}")
            _serve(settings, listener)
    finally:
        lock.close()


def _serve(settings: Settings, listener: socket.socket) -> None:
    url = f"http://{settings.host}:{settings.port}"
    ctx, controller = build(settings)
    with ctx.db.session() as session:
        token = bootstrap_admin(session, clock=ctx.clock)
    write_client_file(settings.client_file, url, token)
    if token is not None:
        log.info("created the admin user; its token is in %s", settings.client_file)
    try:
        controller.run_once()  # inventory and re-adoption before the first request
    except SlurmError as exc:
        raise StartupError(f"cannot use Slurm: {exc}") from exc
    nodes = ctx.backend.inventory()
    for node in nodes:
        sim = " (simulated)" if any(g.simulated for g in node.gpus) else ""
        log.info("node %s: %d GPU%s, %.3g CPU, %d MiB", node.name, len(node.gpus), sim,
                 node.cpu_milli / 1000, node.memory_mb)
    controller.start()
    app = create_app(ctx)
    settle_heap()
    log.info("Trainyard %s on %s (store: %s); Ctrl-C stops the server, not the jobs",
             "serving", url, ctx.db.engine.dialect.name)
    log.info("portal: %s/ (sign in with a password, or with the token in %s); API docs: %s/docs",
             url.rstrip("/"), settings.client_file, url.rstrip("/"))
    try:
        # log_config=None: uvicorn's lines go through the server's own handler, whose
        # formatter redacts URLs' queries (api/serverlog.py), not through handlers of its own.
        # X-Forwarded-For/-Proto only from the proxies the admin names: uvicorn believes them
        # from 127.0.0.1 by default, where any job on this node can send them.
        config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning", access_log=False,
                                log_config=None, timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
                                proxy_headers=bool(settings.trusted_proxies),
                                forwarded_allow_ips=list(settings.trusted_proxies) or [])
        ClosingServer(config, ctx.closing).run(sockets=[listener])
    finally:
        controller.stop()
        ctx.db.dispose()
        log.info("stopped")
