"""The Python SDK: Trainyard's REST API over httpx, answering with the API's own models
(``trainyard.schemas``), so that callers read typed fields instead of repeating the server's
rules on dicts. ``from trainyard.client import Client``; ``Client()`` finds the server and
token as ``yard`` does. Every failure is a `TrainyardError` (one of the kinds below), never
an httpx exception."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeVar, overload
from urllib.parse import quote

from trainyard import client_models as models
from trainyard.client_config import ClientConfig, load_config
from trainyard.client_datasets import DatasetCalls
from trainyard.client_errors import AuthError as AuthError
from trainyard.client_errors import ServerError as ServerError
from trainyard.client_errors import ServerUnreachable as ServerUnreachable
from trainyard.client_errors import TrainyardError as TrainyardError
from trainyard.client_errors import UsageError as UsageError
from trainyard.client_errors import WaitTimeout as WaitTimeout
from trainyard.client_files import FileCalls
from trainyard.client_files import Folder as Folder
from trainyard.client_http import failure, http_client, import_httpx
from trainyard.client_input import Dependencies as Dependencies
from trainyard.client_input import JobFile as JobFile
from trainyard.client_input import Moment as Moment
from trainyard.client_input import (
    check_client_arguments,
    given,
    job_file_body,
    new_key,
    window,
    with_dependencies,
)
from trainyard.client_input import (
    checked_id as _job_id,
)
from trainyard.client_input import (
    path_segment as _seg,
)
from trainyard.client_models import Shape, adapter_for
from trainyard.client_notices import NoticeCalls
from trainyard.client_sessions import SessionCalls
from trainyard.client_sweeps import SweepCalls
from trainyard.client_workdir import workdir_digest
from trainyard.core.keep import KEEP as KEEP
from trainyard.core.keep import Keep
from trainyard.core.logreads import (
    LOG_ATTEMPT_HEADER,
    LOG_MAX_PAGE_BYTES,
    LOG_OFFSET_HEADER,
    LOG_RUN_HEADER,
    LOG_SIZE_HEADER,
    LOG_TASK_HEADER,
)
from trainyard.core.states import EnvironmentState

if TYPE_CHECKING:  # the models are imported by the calls that answer them (client_models.py)
    import httpx  # client_http.py: `yard` sends its requests without it

    from trainyard.schemas.admin import GroupView, RemovalResult, UserQuotaView, VcView
    from trainyard.schemas.alerts import AlertRuleView, AlertView
    from trainyard.schemas.cluster import NodeView, TopView
    from trainyard.schemas.environments import EnvironmentView
    from trainyard.schemas.history import JobMetrics, NodeMetrics
    from trainyard.schemas.images import ImagePullView, ImageRemovalView, NodeImageView
    from trainyard.schemas.jobs import DryRunResult, JobDetail, JobPage, SubmitResult
    from trainyard.schemas.storages import StorageView
    from trainyard.schemas.usage import UsageGrouping, UsageReport
    from trainyard.schemas.users import TokenResponse, TokenView, UserView

Reply = TypeVar("Reply")

# `wait` through a server restart: pauses double from `poll` up to this, for `retry_for` seconds.
MAX_RETRY_PAUSE = 8.0
DEFAULT_RETRY_FOR = 120.0
# `submit` and `clone` send a submit whose answer was lost again, with the same Idempotency-Key:
# pauses double from the first up to MAX_RETRY_PAUSE, for this long (a server restart fits).
DEFAULT_SUBMIT_RETRY_FOR = 30.0
FIRST_SUBMIT_PAUSE = 0.5
RETRIED_STATUSES = (502, 503, 504)
IDEMPOTENCY_HEADER = "Idempotency-Key"  # the IETF draft's; services/idempotency.py on the server


class LogRead(NamedTuple):  # not a dataclass: `yard` does not import dataclasses (~8 ms, issue 33)
    """A piece of a task's log, and where it sits."""

    data: bytes
    offset: int  # where ``data`` starts in the log
    size: int  # the log's size when read
    task: str | None  # ROLE/INDEX of the task shown; None before the task ran
    attempt: int | None = None  # the attempt shown; None before the task ran
    run: int | None = None  # the task's run shown in that attempt (0 first); None before the task ran

    @property
    def end(self) -> int:  # where the next page starts
        return self.offset + len(self.data)


def _page(left: int | None) -> int | None:
    """The page to ask for when at most ``left`` bytes are still wanted (None: no cap)."""
    return None if left is None else min(left, LOG_MAX_PAGE_BYTES)



def _job_file(job: object, content_type: str | None = None,
              dependencies: Dependencies | None = None) -> tuple[bytes, str]:
    try:
        if dependencies is not None:  # sent as JSON, the file's own dependencies kept
            return job_file_body(with_dependencies(job, dependencies, content_type))
        return job_file_body(job, content_type)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


class Client(SweepCalls, FileCalls, NoticeCalls, SessionCalls, DatasetCalls):
    """A connection to one Trainyard server as one user; each method is one API call.

    ``Client()`` finds the server and token as the ``yard`` CLI does: ``TRAINYARD_URL`` and
    ``TRAINYARD_TOKEN``, else ``$TRAINYARD_HOME/client.json`` (written by ``yard up``). Given
    a ``url``, it uses that server with exactly the ``token`` given (a configured token never
    goes to a server it was not meant for). Use it as a context manager, or ``close()`` it.
    """

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0) -> None:
        if url is None:
            config = load_config()
            url, token = config.url, token if token is not None else config.token
        try:
            check_client_arguments(url, token, timeout)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        self.url = url.rstrip("/")
        self._http = http_client(self.url, token, timeout)  # httpx's, or `yard`'s own (client_http.py)

    @classmethod
    def from_config(cls, config: ClientConfig | None = None) -> Client:
        """A client for the server and token in ``config`` (default: as ``Client()`` finds them)."""
        config = config or load_config()
        return cls(config.url, config.token)

    def websocket(self, path: str) -> tuple[str, dict[str, str]]:
        """The ``ws(s)://`` URL of API ``path`` and the headers that authenticate it, for a
        WebSocket the caller opens itself (``yard port-forward``'s tunnels)."""
        base = "ws" + self.url[len("http"):] if self.url.startswith("http") else self.url
        auth = self._http.headers.get("Authorization")
        return base + "/api/v1" + path, {"Authorization": auth} if auth else {}

    def close(self) -> None:
        """Close the connections; the client cannot be used after."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------------------

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        with self._sending(method, path):
            response = self._http.request(method, path, **kwargs)
        self._raise_for(response)
        media_type = response.headers.get("content-type", "").split(";")[0].strip()
        if response.content and media_type not in ("application/json", "text/plain"):  # Trainyard's answers
            raise UsageError(f"{self.url} answered {method} {path} with {media_type or 'no media type'}, not as "
                             "Trainyard does; is TRAINYARD_URL the Trainyard server's address?",
                             status=response.status_code)
        return response

    @contextmanager
    def _sending(self, method: str, path: str) -> Iterator[None]:
        """Each way httpx (or client_http.py) fails to send a request or read its answer, as a `TrainyardError`."""
        try:
            yield
        except Exception as exc:
            if (kind := failure(exc)) == "timeout":
                raise ServerUnreachable(f"the Trainyard server at {self.url} did not answer in time ({exc!r}); "
                                        "it may be overloaded, or a firewall drops the connection") from exc
            if kind == "unreachable":
                raise ServerUnreachable(f"cannot reach the Trainyard server at {self.url} ({exc}); "
                                        "is `yard up` running, and is TRAINYARD_URL right?") from exc
            if kind == "usage":
                raise UsageError(f"cannot send {method} {path}: {exc}") from exc
            raise

    def _parse(self, shape: Shape[Reply], content: bytes) -> Reply:
        """The answer as ``shape`` (a model, or an adapter for lists of them); an answer of
        another shape (another server's JSON, a Trainyard of an incompatible version) is a
        `UsageError`, not pydantic's."""
        from pydantic import ValidationError

        adapter = adapter_for(shape)  # the model's module imported now, if this is its first answer
        try:
            return adapter.validate_json(content)
        except ValidationError as exc:
            raise UsageError(f"{self.url} answered with a reply that Trainyard's SDK cannot read "
                             f"({exc.error_count()} problem(s), first: {exc.errors()[0]['msg']}); is TRAINYARD_URL "
                             "a Trainyard server of the same version as this SDK?") from exc

    def _raise_for(self, response: httpx.Response) -> None:
        if response.is_success:
            return
        try:
            body = response.json()
            message, errors = body.get("detail") or response.reason_phrase, body.get("errors") or []
        except (ValueError, AttributeError):  # not JSON, or not Trainyard's error body
            message, errors = response.text or response.reason_phrase, []
        status = response.status_code
        cls = AuthError if status in (401, 403) else ServerError if status >= 500 else TrainyardError
        raise cls(str(message), status=status, errors=errors if isinstance(errors, list) else [])

    # -- jobs -----------------------------------------------------------------------------

    @overload
    def submit(self, job_file: JobFile, *, content_type: str | None = ..., dry_run: Literal[False] = False,
               idempotency_key: str | None = ..., dependencies: Dependencies | None = ..., retry_for: float = ...,
               workdir: Folder | None = ...,
               on_retry: Callable[[TrainyardError, float], None] | None = ...) -> SubmitResult: ...

    @overload
    def submit(self, job_file: JobFile, *, content_type: str | None = ..., dry_run: Literal[True],
               idempotency_key: str | None = ..., dependencies: Dependencies | None = ..., retry_for: float = ...,
               workdir: Folder | None = ...,
               on_retry: Callable[[TrainyardError, float], None] | None = ...) -> DryRunResult: ...

    @overload
    def submit(self, job_file: JobFile, *, content_type: str | None = ..., dry_run: bool,
               idempotency_key: str | None = ..., dependencies: Dependencies | None = ..., retry_for: float = ...,
               workdir: Folder | None = ...,
               on_retry: Callable[[TrainyardError, float], None] | None = ...) -> SubmitResult | DryRunResult: ...

    def submit(self, job_file: JobFile, *, content_type: str | None = None, dry_run: bool = False,
               idempotency_key: str | None = None, dependencies: Dependencies | None = None,
               retry_for: float = DEFAULT_SUBMIT_RETRY_FOR, workdir: Folder | None = None,
               on_retry: Callable[[TrainyardError, float], None] | None = None) -> SubmitResult | DryRunResult:
        """Submit a job: a path to its file (``"train.yaml"``, a ``Path``), the file's YAML or
        JSON text, or the job as a dict; returns the new job's id and state. With ``dry_run``
        only validate it and answer the job as Trainyard would run it (secrets masked).
        ``content_type`` overrides the media type (default: JSON for a dict or .json, else YAML).

        The submit is made at most once: it carries an ``Idempotency-Key`` (``idempotency_key``,
        else a new random one), and when the server cannot be reached or its answer is lost (a
        dropped connection, a timeout, a 502, 503 or 504) it is sent again with the same key, for up to
        ``retry_for`` seconds (0: not at all), ``on_retry(error, pause)`` called before each
        pause; the server answers a retry with the job the first one made. Pass your own key
        to retry across processes (a script run again after a crash). ``dependencies`` (Slurm's
        ``"afterok:12,afterany:14"`` or ``{"afterok": [12]}``) adds to the file's: the job waits for those.
        ``workdir`` (else the job file's own ``workdir``, relative to it) is a folder to send
        with the job (`upload_workdir`), or an upload's digest: every task starts in a copy of it."""
        answer = self._submit_answer(job_file, content_type=content_type, dry_run=dry_run,
                                     idempotency_key=idempotency_key, dependencies=dependencies,
                                     retry_for=retry_for, workdir=workdir, on_retry=on_retry)
        return self._parse(models.DRY_RUN, answer) if dry_run else self._parse(models.SUBMITTED, answer)

    def _submit_answer(self, job_file: JobFile, *, content_type: str | None = None, dry_run: bool = False,
                       idempotency_key: str | None = None, dependencies: Dependencies | None = None,
                       retry_for: float = DEFAULT_SUBMIT_RETRY_FOR, workdir: Folder | None = None,
                       on_retry: Callable[[TrainyardError, float], None] | None = None) -> bytes:
        """`submit`'s answer as the server sent it (JSON): `yard submit` reads it without the
        models (cli/plain.py)."""
        content, media_type = _job_file(job_file, content_type, dependencies)
        headers = {"Content-Type": media_type, IDEMPOTENCY_HEADER: idempotency_key or new_key()}
        sent = workdir_digest(self, job_file, workdir)
        response = self._submitting("/jobs", retry_for, on_retry, content=content, headers=headers,
                                    params=given(dryRun="true" if dry_run else None, workdir=sent))
        return response.content

    def clone(self, job_id: int, *, job_file: JobFile | None = None, name: str | None = None,
              vc: str | None = None, priority: str | None = None, idempotency_key: str | None = None,
              retry_for: float = DEFAULT_SUBMIT_RETRY_FOR,
              on_retry: Callable[[TrainyardError, float], None] | None = None) -> SubmitResult:
        """Submit a copy of one of your jobs (an admin: anyone's) that keeps its secrets: the
        server holds them and shows them masked (``******``). ``job_file`` replaces the whole
        job (as `submit` takes it, e.g. `job()`'s ``spec`` edited): what it still shows masked
        is filled from the original. ``name``, ``vc`` and ``priority`` change just those.
        Made at most once, and sent again when its answer is lost, as `submit` says."""
        params = given(name=name, vc=vc, priority=priority)
        content, headers = b"", {IDEMPOTENCY_HEADER: idempotency_key or new_key()}
        if job_file is not None:
            content, media_type = _job_file(job_file)
            headers["Content-Type"] = media_type
        response = self._submitting(f"/jobs/{_job_id(job_id)}/clone", retry_for, on_retry, content=content,
                                    headers=headers, params=params)
        return self._parse(models.SUBMITTED, response.content)

    def _submitting(self, path: str, retry_for: float, on_retry: Callable[[TrainyardError, float], None] | None,
                    **kwargs: Any) -> httpx.Response:
        """``POST path``, which makes a job, sent again while it gets no answer or a 502-504: its
        ``Idempotency-Key`` (in ``kwargs``' headers, the same each time) makes the server answer
        a retry with the job the first one made, so a lost answer never makes a second job."""
        started = time.monotonic()
        pause = FIRST_SUBMIT_PAUSE
        while True:
            try:
                return self._request("POST", path, **kwargs)
            except (ServerUnreachable, ServerError) as exc:
                # A 500 is the server's own failure, said at once; a gateway's 502-504 and no
                # answer at all are a restart or the network, which waiting may outlast.
                passing = isinstance(exc, ServerUnreachable) or exc.status in RETRIED_STATUSES
                if not passing or time.monotonic() - started + pause > retry_for:
                    raise
                if on_retry is not None:
                    on_retry(exc, pause)
                time.sleep(pause)
                pause = min(pause * 2, MAX_RETRY_PAUSE)

    def jobs(self, *, state: str | None = None, user: str | None = None, vc: str | None = None,
             name: str | None = None, order: str | None = None, limit: int = 50, before: int | None = None,
             after: int | None = None) -> JobPage:
        """A page of jobs, newest first (``order="oldest"``: oldest first); pass the page's
        ``next`` as ``before`` (oldest first: ``after``), with the same filters, for the next
        one. ``state`` is comma-separated: ``"WAITING,RUNNING"``; ``name``: text in the name."""
        answer = self._jobs_answer(state=state, user=user, vc=vc, name=name, order=order, limit=limit,
                                   before=before, after=after)
        return self._parse(models.JOB_PAGE, answer)

    def _jobs_answer(self, **filters: Any) -> bytes:
        """`jobs`' answer as the server sent it (JSON): `yard jobs` reads its table from it
        without the models (cli/plain.py)."""
        return self._request("GET", "/jobs", params=given(**filters)).content

    def job(self, job_id: int) -> JobDetail:
        """One job: state, attempts and their tasks, placement, events, its spec (secrets masked)."""
        return self._parse(models.JOB, self._job_answer(job_id))

    def _job_answer(self, job_id: int) -> bytes:
        """`job`'s answer as the server sent it (JSON): `yard logs` reads the job's tasks from it
        without the models (cli/plain.py)."""
        return self._request("GET", f"/jobs/{_job_id(job_id)}").content

    def stop(self, job_id: int, *, reason: str = "") -> JobDetail:
        """Stop a job (SIGTERM, then SIGKILL after its grace period); returns it as it is now.
        ``reason`` is told to the job's owner in its message and history."""
        params = {"reason": reason} if reason else None
        return self._parse(models.JOB, self._request("POST", f"/jobs/{_job_id(job_id)}/stop", params=params).content)

    def suspend(self, job_id: int) -> JobDetail:
        """Suspend a job and hold it until ``resume``: a running one (``preemption: suspend``)
        is told to save its state first; a waiting one is simply held."""
        return self._parse(models.JOB, self._request("POST", f"/jobs/{_job_id(job_id)}/suspend").content)

    def resume(self, job_id: int) -> JobDetail:
        """Let a suspended job resume: it waits for room as a new attempt, keeping its place."""
        return self._parse(models.JOB, self._request("POST", f"/jobs/{_job_id(job_id)}/resume").content)

    def job_metrics(self, job_id: int, *, since: Moment = None, until: Moment = None,
                    task: str | None = None) -> JobMetrics:
        """A job's figures per task (CPU, memory, GPU utilisation and memory; None where not
        measured) over a window: ``since``/``until`` a datetime, a timedelta before now, or
        the API's text ("1h", ISO 8601); by default the last hour. ``task``: "ROLE/INDEX"."""
        params = window(since, until) | ({"task": task} if task is not None else {})
        return self._parse(models.JOB_METRICS, self._request("GET", f"/jobs/{_job_id(job_id)}/metrics",
                                                     params=params).content)

    def read_log(self, job_id: int, *, task: str | None = None, attempt: int | None = None,
                 offset: int | None = None, tail: int | None = None, limit: int | None = None,
                 run: int | None = None, previous: bool = False) -> LogRead:
        """One page of a task's log (default: the first task of the latest attempt, its latest
        run; ``run`` N or ``previous``: an earlier run of it in the attempt, as ``kubectl logs
        --previous``; at most ``limit`` bytes, the server's page size if not given), with which
        task, attempt and run it is; a log of any size: `iter_logs` or `logs`."""
        params = given(task=task, attempt=attempt, offset=offset, tail=tail, limit=limit, run=run,
                       previous="true" if previous else None)
        response = self._request("GET", f"/jobs/{_job_id(job_id)}/logs", params=params)
        shown, ran = response.headers.get(LOG_ATTEMPT_HEADER), response.headers.get(LOG_RUN_HEADER)
        return LogRead(
            data=response.content,
            offset=int(response.headers.get(LOG_OFFSET_HEADER, 0)),
            size=int(response.headers.get(LOG_SIZE_HEADER, len(response.content))),
            task=response.headers.get(LOG_TASK_HEADER),
            attempt=None if shown is None else int(shown),
            run=None if ran is None else int(ran),
        )

    def iter_logs(self, job_id: int, *, task: str | None = None, attempt: int | None = None,
                  offset: int | None = None, tail: int | None = None,
                  limit_bytes: int | None = None, run: int | None = None, previous: bool = False) -> Iterator[LogRead]:
        """A task's whole log as it is now, page after page (each whole lines but for a line
        longer than a page), without holding it all: from ``offset``, or from where the last
        ``tail`` lines begin; at most ``limit_bytes`` bytes in all if given (the last page
        read then ends before ``size`` when the log was cut): joined, the log. ``run``, ``previous``: `read_log`'s."""
        page = self.read_log(job_id, task=task, attempt=attempt, offset=offset, tail=tail, limit=_page(limit_bytes),
                             run=run, previous=previous)
        yield page
        end = page.size  # what is there now; a running task's log grows on, `follow_logs` follows it
        left = None if limit_bytes is None else limit_bytes - len(page.data)
        # The first page says which attempt (and run) it showed: the next pages keep to it, even if a new one begins.
        pinned = page.attempt if page.attempt is not None else attempt
        pinned_run = page.run if (run is not None or previous) else None
        while page.data and page.end < end and (left is None or left > 0):
            page = self.read_log(job_id, task=page.task or task, attempt=pinned, offset=page.end, limit=_page(left),
                                 run=pinned_run)
            yield page
            if left is not None:
                left -= len(page.data)

    def logs(self, job_id: int, *, task: str | None = None, attempt: int | None = None,
             offset: int | None = None, tail: int | None = None, limit_bytes: int | None = None,
             run: int | None = None, previous: bool = False) -> bytes:
        """A task's whole log (or its last ``tail`` lines, or at most ``limit_bytes``), all pages
        joined (`iter_logs` holds one at a time); ``run`` and ``previous`` as `read_log`'s."""
        pages = self.iter_logs(job_id, task=task, attempt=attempt, offset=offset, tail=tail, limit_bytes=limit_bytes,
                               run=run, previous=previous)
        return b"".join(page.data for page in pages)

    def follow_logs(self, job_id: int, *, task: str | None = None, attempt: int | None = None,
                    tail: int | None = None) -> Iterator[bytes]:
        """A task's log as it is written, until the task ends. Raises `ServerUnreachable` if
        the server goes away (or shuts down) first, which does not stop the job."""
        params = given(task=task, attempt=attempt, tail=tail)
        return self._stream_logs(job_id, {**params, "follow": "true"})

    def all_logs(self, job_id: int, *, attempt: int | None = None, tail: int | None = None,
                 follow: bool = False) -> Iterator[bytes]:
        """Every task's log, each line prefixed ``[ROLE/INDEX] `` (whole lines only): task after
        task as the logs are now (only the last ``tail`` lines of each if given), or with
        ``follow`` as lines are written until every task has ended. Streamed, a log of any size;
        raises `ServerUnreachable` as `follow_logs` does."""
        params = given(attempt=attempt, tail=tail, follow=follow or None)
        return self._stream_logs(job_id, {**params, "all": "true"})

    def _stream_logs(self, job_id: int, params: dict[str, Any]) -> Iterator[bytes]:
        doing = "following" if params.get("follow") else "reading"
        lost = f"lost the Trainyard server at {self.url} while {doing} the log of job {job_id}"
        import_httpx()
        import httpx

        try:
            with self._http.stream("GET", f"/jobs/{_job_id(job_id)}/logs", params=params, timeout=None) as response:
                if not response.is_success:
                    response.read()
                    self._raise_for(response)
                yield from response.iter_bytes()
        except httpx.TransportError as exc:
            raise ServerUnreachable(f"{lost} ({exc})") from exc
        # A stopping server ends its followers as it would at the task's end: it is the
        # server's being still there that tells the two apart.
        try:
            self._http.get("/healthz")
        except httpx.TransportError as exc:
            raise ServerUnreachable(f"{lost}: it stopped (the job goes on; follow it again once the server is "
                                    "back)") from exc

    def wait(self, job_id: int, *, timeout: float | None = None, poll: float = 0.5,
             retry_for: float = DEFAULT_RETRY_FOR,
             on_retry: Callable[[TrainyardError, float], None] | None = None) -> JobDetail:
        """Block until the job has ended; returns the job. Raises ``WaitTimeout`` after
        ``timeout`` seconds (None: never). While the server cannot be reached or fails with a
        5xx (a restart), asks again after pauses doubling from ``poll`` up to 8 s, for up to
        ``retry_for`` seconds of failures in a row (0: not at all), calling ``on_retry(error,
        pause)`` before each pause; then raises the last error."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self._job_through_outages(job_id, deadline, poll, retry_for, on_retry)
            if job.state.is_final:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"job {job_id} is still {job.state} after {timeout:g} s")
            time.sleep(poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic())))

    def _job_through_outages(self, job_id: int, deadline: float | None, poll: float, retry_for: float,
                             on_retry: Callable[[TrainyardError, float], None] | None) -> JobDetail:
        """`job`, asked again while the server is unreachable or failing, as `wait` says."""
        failing_since: float | None = None
        failures = 0
        while True:
            try:
                return self.job(job_id)
            except (ServerUnreachable, ServerError) as exc:
                now = time.monotonic()
                failing_since = now if failing_since is None else failing_since
                if deadline is not None and now >= deadline:
                    raise WaitTimeout(f"job {job_id}: no answer from the server in time ({exc.message})") from exc
                left = retry_for - (now - failing_since)
                left = left if deadline is None else min(left, deadline - now)
                if left <= 0:
                    raise
                pause = min(poll * 2**failures, MAX_RETRY_PAUSE, left)
                failures += 1
                if on_retry is not None:
                    on_retry(exc, pause)
                time.sleep(pause)

    # -- cluster and users ----------------------------------------------------------------

    def nodes(self) -> list[NodeView]:
        """The cluster's nodes: their GPUs, CPUs and memory, what is allocated, and what their
        newest samples measured (``usage``; None: not measured lately)."""
        return self._parse(models.NODES, self._request("GET", "/nodes").content)

    def images(self) -> list[NodeImageView]:
        """Which node holds which container image (OpenPAI's image cache)."""
        return self._parse(models.IMAGES, self._request("GET", "/images").content)

    def pull_image(self, image: str, *, node: str | None = None) -> list[ImagePullView]:
        """Pull ``image`` to ``node`` (None: every node) ahead of the jobs that need it, unless
        it is there; returns when done, one entry per node (admin)."""
        body = {"image": image, "node": node}
        return self._parse(models.PULLS, self._request("POST", "/images/pull", json=body, timeout=3600.0).content)

    def remove_image(self, image: str, *, node: str | None = None) -> list[ImageRemovalView]:
        """Remove ``image`` from ``node`` (None: every node) where it is (admin); 409 while a
        task of a job that has not ended runs in it there."""
        body = {"image": image, "node": node}
        return self._parse(models.REMOVALS, self._request("POST", "/images/remove", json=body, timeout=600.0).content)

    def top(self) -> TopView:
        """The live view: nodes, and the running jobs you may see with their GPU, CPU and
        memory use, busiest GPUs first."""
        return self._parse(models.TOP, self._request("GET", "/top").content)

    def usage(self, *, by: UsageGrouping = "user", since: datetime | None = None, until: datetime | None = None,
              user: str | None = None, vc: str | None = None, group: str | None = None,
              job: int | None = None) -> UsageReport:
        """GPU-, CPU- and memory-hours allocated in ``[since, until)`` (default: the last 7
        days) per user, VC, group or job, with GPU and CPU efficiency (None: not measured).
        A non-admin sees their own jobs only."""
        return self._parse(models.USAGE, self._usage_answer(**given(
            by=by, since=since, until=until, user=user, vc=vc, group=group, job=None if job is None else _job_id(job))))

    def _usage_answer(self, **asked: object) -> bytes:  # `usage`'s JSON: `yard job` reads it in cli/plain.py
        return self._request("GET", "/usage", params={k: v.isoformat() if isinstance(v, datetime) else v
                                                      for k, v in asked.items()}).content

    def node_metrics(self, name: str, *, since: Moment = None, until: Moment = None) -> NodeMetrics:
        """A node's figures (CPU, memory, disk, network, each GPU) over a window, as ``job_metrics``."""
        return self._parse(models.NODE_METRICS, self._request("GET", f"/nodes/{_seg(name)}/metrics",
                                                      params=window(since, until)).content)

    def healthz(self) -> dict[str, str]:
        """The server's health (needs no token)."""
        from pydantic import TypeAdapter

        return self._parse(TypeAdapter(dict[str, str]), self._request("GET", "/healthz").content)

    def me(self) -> UserView:
        """The user the token belongs to."""
        return self._parse(models.USER, self._request("GET", "/me").content)

    def create_user(self, name: str, *, admin: bool = False) -> UserView:
        """Create a user (admin); give them a token with `create_token`."""
        response = self._request("POST", "/users", json={"name": name, "admin": admin})
        return self._parse(models.USER, response.content)

    def users(self) -> list[UserView]:
        """Every user (admin)."""
        return self._parse(models.USERS, self._request("GET", "/users").content)

    def disable_user(self, name: str, *, stop_jobs: bool = False) -> RemovalResult:
        """Refuse the user's tokens; their jobs go on (``keptJobs``) unless ``stop_jobs``."""
        response = self._request("POST", f"/users/{_seg(name)}/disable", params={"stopJobs": _flag(stop_jobs)})
        return self._parse(models.REMOVAL, response.content)

    def enable_user(self, name: str) -> UserView:
        """Accept a disabled user's tokens again (admin)."""
        return self._parse(models.USER, self._request("POST", f"/users/{_seg(name)}/enable").content)

    def delete_user(self, name: str, *, force: bool = False) -> RemovalResult:
        """Delete a user; refused (409) while they have waiting or running jobs, unless
        ``force``, which stops them (``stoppedJobs``)."""
        response = self._request("DELETE", f"/users/{_seg(name)}", params={"force": _flag(force)})
        return self._parse(models.REMOVAL, response.content)

    def set_password(self, name: str, password: str, *, current: str | None = None) -> UserView:
        """Set a portal password: your own (``current``: the one you have, if any), or (admin)
        anyone's. The user's browser sessions are signed out."""
        body = {"password": password} | ({"current": current} if current is not None else {})
        response = self._request("PUT", f"/users/{_seg(name)}/password", json=body)
        return self._parse(models.USER, response.content)

    def clear_password(self, name: str) -> UserView:
        """Remove a user's portal password (admin): they sign in with a token until one is set."""
        return self._parse(models.USER, self._request("DELETE", f"/users/{_seg(name)}/password").content)

    # -- environments -------------------------------------------------------------------

    def create_environment(self, name: str, *, requirements: str | None = None, base: str | None = None,
                           group: str | None = None, vc: str | None = None, base_path: str | None = None,
                           image: str | None = None) -> EnvironmentView:
        """Build a custom environment from a pip ``requirements`` file's text, optionally on a
        ``base`` environment and shared with ``group``: answered at once, BUILDING, with its
        build job's id (``buildJobId``; ``wait_environment`` waits for it). Admins declare a
        base environment with ``base_path`` (a Python environment every node has) or ``image``."""
        body = {"name": name, "requirements": requirements, "base": base, "group": group, "virtualCluster": vc,
                "basePath": base_path, "image": image}
        response = self._request("POST", "/environments", json=given(**body))
        return self._parse(models.ENVIRONMENT, response.content)

    def environments(self) -> list[EnvironmentView]:
        """The environments you may run jobs in (an admin: all)."""
        return self._parse(models.ENVIRONMENTS, self._request("GET", "/environments").content)

    def environment(self, name: str) -> EnvironmentView:
        """One environment: its state, kind, base, visibility and build job."""
        return self._parse(models.ENVIRONMENT, self._request("GET", f"/environments/{_seg(name)}").content)

    def wait_environment(self, name: str, *, timeout: float | None = None, poll: float = 0.5) -> EnvironmentView:
        """Block until the environment is built: READY, or FAILED (its build log is
        ``logs(env.buildJobId)``). Raises ``WaitTimeout`` after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        env = self.environment(name)
        if env.state == EnvironmentState.BUILDING and env.buildJobId is not None:
            self.wait(env.buildJobId, timeout=timeout, poll=poll)
        # The controller settles an environment in its cycle after the build job has ended.
        while (env := self.environment(name)).state == EnvironmentState.BUILDING:
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"environment {name} is still BUILDING after {timeout:g} s")
            time.sleep(poll)
        return env

    def delete_environment(self, name: str, *, force: bool = False) -> RemovalResult:
        """Delete an environment of yours (admins: any); refused (409) while a job that has not
        ended uses it or it is being built, unless ``force`` (which stops its build)."""
        response = self._request("DELETE", f"/environments/{_seg(name)}", params={"force": _flag(force)})
        return self._parse(models.REMOVAL, response.content)

    # -- administration -------------------------------------------------------------------

    def vcs(self) -> list[VcView]:
        """Virtual clusters: quota, used, borrowed, waiting (a user sees those they may use)."""
        return self._parse(models.VCS, self._request("GET", "/vcs").content)

    def create_vc(self, name: str, *, gpus: int, model: str | None = None,
                  priority_preemption: bool = True, gpu_sharing: str | None = None,
                  borrow_limit: int | None = None, lend_limit: int | None = None, weight: float = 1.0) -> VcView:
        """Create a virtual cluster guaranteed ``gpus`` GPUs (of ``model``; default any) (admin);
        ``gpu_sharing``: same-user (default), same-group or anyone; borrowing as ``set_vc_borrowing``."""
        body: dict[str, object] = {
            "name": name, "gpus": gpus, "model": model, "priorityPreemption": priority_preemption,
            "borrowLimit": borrow_limit, "lendLimit": lend_limit, "weight": weight,
        }
        if gpu_sharing is not None:
            body["gpuSharing"] = gpu_sharing
        return self._parse(models.VC, self._request("POST", "/vcs", json=body).content)

    def set_vc_borrowing(self, name: str, *, borrow_limit: int | None | Keep = KEEP,
                         lend_limit: int | None | Keep = KEEP, weight: float | Keep = KEEP) -> VcView:
        """Set how many whole GPUs of each model a VC (``default`` too) may borrow beyond its
        quota and lend of its unused quota (None: no limit), and its weight among borrowers
        (admin); one left as ``KEEP`` stays as it is."""
        body = {key: value for key, value in
                (("borrowLimit", borrow_limit), ("lendLimit", lend_limit), ("weight", weight))
                if not isinstance(value, Keep)}
        response = self._request("PUT", f"/vcs/{_seg(name)}/borrowing", json=body)
        return self._parse(models.VC, response.content)

    def set_vc_sharing(self, name: str, gpu_sharing: str) -> VcView:
        """Set whose fractional GPU shares a VC's jobs may share a device with: same-user,
        same-group or anyone (admin)."""
        response = self._request("PUT", f"/vcs/{name}/sharing", json={"gpuSharing": gpu_sharing})
        return self._parse(models.VC, response.content)

    def set_vc_quota(self, name: str, *, gpus: int, model: str | None = None) -> VcView:
        """Set a virtual cluster's guaranteed GPUs of one model; 0 removes the model (admin)."""
        response = self._request("PUT", f"/vcs/{name}/quota", json={"gpus": gpus, "model": model})
        return self._parse(models.VC, response.content)

    def grant_vc(self, name: str, grantee: str) -> VcView:
        """Let a user, or ``@group``, submit to a virtual cluster (admin)."""
        response = self._request("POST", f"/vcs/{name}/grants", json={"grantee": grantee})
        return self._parse(models.VC, response.content)

    def revoke_grant(self, name: str, grantee: str, *, force: bool = False) -> RemovalResult:
        """Take back a user's or ``@group``'s grant; refused (409) while it is what lets a
        waiting or running job use the VC, unless ``force``, which stops those jobs."""
        response = self._request("DELETE", f"/vcs/{_seg(name)}/grants/{_seg(grantee)}", params={"force": _flag(force)})
        return self._parse(models.REMOVAL, response.content)

    def delete_vc(self, name: str, *, force: bool = False) -> RemovalResult:
        """Delete a VC; refused (409) while jobs wait or run in it, unless ``force``, which stops them."""
        response = self._request("DELETE", f"/vcs/{_seg(name)}", params={"force": _flag(force)})
        return self._parse(models.REMOVAL, response.content)

    def groups(self) -> list[GroupView]:
        """Groups and their members (admin)."""
        return self._parse(models.GROUPS, self._request("GET", "/groups").content)

    def create_group(self, name: str) -> GroupView:
        """Create a group of users (admin)."""
        return self._parse(models.GROUP, self._request("POST", "/groups", json={"name": name}).content)

    def add_member(self, group: str, user: str) -> GroupView:
        """Add a user to a group (admin)."""
        response = self._request("POST", f"/groups/{group}/members", json={"user": user})
        return self._parse(models.GROUP, response.content)

    def remove_member(self, group: str, user: str, *, force: bool = False) -> RemovalResult:
        """Take a user out of a group; refused (409) while the group is what lets one of their
        waiting or running jobs use its VC, unless ``force``, which stops those jobs."""
        path = f"/groups/{_seg(group)}/members/{_seg(user)}"
        response = self._request("DELETE", path, params={"force": _flag(force)})
        return self._parse(models.REMOVAL, response.content)

    def storages(self) -> list[StorageView]:
        """Storages: an admin sees all with their grants; a user those they may mount."""
        return self._parse(models.STORAGES, self._request("GET", "/storages").content)

    def storage(self, name: str) -> StorageView:
        """One storage (``home``, ``@group`` too), with the caller's access."""
        return self._parse(models.STORAGE, self._request("GET", f"/storages/{_seg(name)}").content)

    def create_storage(self, name: str, path: str, *, read_only: bool = False, kind: str = "",
                       description: str = "") -> StorageView:
        """Define a storage: a path every node has mounted (admin)."""
        body = {"name": name, "path": path, "readOnly": read_only, "kind": kind, "description": description}
        return self._parse(models.STORAGE, self._request("POST", "/storages", json=body).content)

    def grant_storage(self, name: str, grantee: str, *, read_only: bool = False) -> StorageView:
        """Let a user, or ``@group``, mount a storage, read-only if asked (admin)."""
        response = self._request("POST", f"/storages/{_seg(name)}/grants",
                                 json={"grantee": grantee, "readOnly": read_only})
        return self._parse(models.STORAGE, response.content)

    def revoke_storage(self, name: str, grantee: str, *, force: bool = False) -> RemovalResult:
        """Take back a storage grant; refused (409) while it lets a waiting or running job mount
        the storage, unless ``force``, which stops those jobs (admin)."""
        response = self._request("DELETE", f"/storages/{_seg(name)}/grants/{_seg(grantee)}",
                                 params={"force": _flag(force)})
        return self._parse(models.REMOVAL, response.content)

    def delete_storage(self, name: str, *, force: bool = False) -> RemovalResult:
        """Delete a storage (never its files); refused (409) while jobs mount it, unless
        ``force``, which stops them (admin)."""
        response = self._request("DELETE", f"/storages/{_seg(name)}", params={"force": _flag(force)})
        return self._parse(models.REMOVAL, response.content)

    def quotas(self) -> list[UserQuotaView]:
        """Every per-user GPU quota (admin)."""
        return self._parse(models.QUOTAS, self._request("GET", "/quotas").content)

    def set_quota(self, user: str, *, priority: str, gpus: float | None) -> list[UserQuotaView]:
        """At most ``gpus`` GPUs for ``user`` at ``priority``; None removes the limit (admin)."""
        response = self._request("PUT", f"/quotas/{user}", json={"priority": priority, "gpus": gpus})
        return self._parse(models.QUOTAS, response.content)

    def cordon(self, node: str, *, cordoned: bool = True) -> NodeView:
        """Place nothing new on a node (``cordoned=False``: allow it again) (admin)."""
        response = self._request("POST", f"/nodes/{node}/{'cordon' if cordoned else 'uncordon'}")
        return self._parse(models.NODE, response.content)

    def label_node(self, node: str, changes: dict[str, str | None]) -> NodeView:
        """Set labels on a node (a value) or remove them (None), as ``kubectl label`` (admin);
        the scheduler sees them from its next cycle."""
        response = self._request("PATCH", f"/nodes/{quote(node, safe='')}/labels", json={"labels": changes})
        return self._parse(models.NODE, response.content)

    def alerts(self, *, include_resolved: bool = False) -> list[AlertView]:
        """Alerts, newest first (firing ones; ``include_resolved``: resolved too); a user sees
        those about their own jobs, an admin all."""
        response = self._request("GET", "/alerts", params={"all": "true"} if include_resolved else None)
        return self._parse(models.ALERTS, response.content)

    def alert_rules(self) -> list[AlertRuleView]:
        """The alert rules with their thresholds (admin)."""
        return self._parse(models.ALERT_RULES, self._request("GET", "/alerts/rules").content)

    def set_alert_rule(self, name: str, *, enabled: bool | None = None, params: dict[str, float] | None = None,
                       cordon: bool | None = None) -> AlertRuleView:
        """Change an alert rule (admin); the controller's next evaluation uses it."""
        from trainyard.schemas.alerts import AlertRuleUpdate

        body = AlertRuleUpdate(enabled=enabled, params=params, cordon=cordon).model_dump(exclude_none=True)
        response = self._request("PUT", f"/alerts/rules/{quote(name, safe='')}", json=body)
        return self._parse(models.ALERT_RULE, response.content)

    def prometheus_alert_rules(self) -> str:
        """The enabled rules, with their thresholds, as a Prometheus alerting-rules file (admin)."""
        return self._request("GET", "/alerts/rules.yml").text

    def stop_flagged_job(self, alert_id: int) -> JobDetail:
        """Stop the job an alert is about (admin); its owner is told the rule and why."""
        return self._parse(models.JOB, self._request("POST", f"/alerts/{_job_id(alert_id, 'alert')}/stop").content)

    def create_token(self, *, user: str | None = None, name: str = "") -> TokenResponse:
        """A new API token for yourself, or (admin) for ``user``; its text is shown only now."""
        response = self._request("POST", "/tokens", json={"user": user, "name": name})
        return self._parse(models.TOKEN_RESPONSE, response.content)

    def tokens(self, *, user: str | None = None, every_user: bool = False) -> list[TokenView]:
        """Live tokens (never the secrets): the caller's, ``user``'s or every user's (admins)."""
        params: dict[str, str] = {"all": _flag(every_user)}
        if user is not None:
            params["user"] = user
        return self._parse(models.TOKENS, self._request("GET", "/tokens", params=params).content)

    def revoke_token(self, token_id: int) -> TokenView:
        """Revoke a token by its id (from `tokens`); the server refuses it from then on."""
        return self._parse(models.TOKEN, self._request("DELETE", f"/tokens/{token_id}").content)


def _flag(value: bool) -> str:
    return "true" if value else "false"


