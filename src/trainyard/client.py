"""The Python SDK: Trainyard's REST API over httpx, answering with the API's own models
(``trainyard.schemas``), so that callers read typed fields instead of repeating the server's
rules on dicts.

    from trainyard.client import Client

    with Client() as yard:  # the server and token the CLI uses
        job = yard.submit("examples/hello-world.yaml")
        print(yard.wait(job.id).state)

Every failure is one of this module's exceptions (`TrainyardError` and its kinds), never
an httpx or pydantic one.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, overload

import httpx
from pydantic import BaseModel, TypeAdapter, ValidationError

from trainyard.client_config import ClientConfig, load_config
from trainyard.schemas.admin import GroupView, UserQuotaView, VcView
from trainyard.schemas.cluster import NodeView
from trainyard.schemas.jobs import (
    LOG_OFFSET_HEADER,
    LOG_SIZE_HEADER,
    LOG_TASK_HEADER,
    DryRunResult,
    JobDetail,
    JobPage,
    SubmitResult,
)
from trainyard.schemas.users import TokenResponse, UserView

__all__ = [
    "AuthError",
    "Client",
    "ClientConfig",
    "JobFile",
    "LogRead",
    "ServerError",
    "ServerUnreachable",
    "TrainyardError",
    "UsageError",
    "WaitTimeout",
    "load_config",
]

_NODES = TypeAdapter(list[NodeView])
_USERS = TypeAdapter(list[UserView])
_VCS = TypeAdapter(list[VcView])
_GROUPS = TypeAdapter(list[GroupView])
_QUOTAS = TypeAdapter(list[UserQuotaView])
_HEALTH = TypeAdapter(dict[str, str])

# A job file as `submit` takes it: a path (``Path``, or a one-line string naming an existing
# file or ending in .yaml/.yml/.json), the file's text (YAML or JSON) or bytes, or the job as a mapping.
JobFile = str | bytes | os.PathLike[str] | Mapping[str, Any]
_JOB_FILE_SUFFIXES = (".yaml", ".yml", ".json")

# `wait` through a server restart: pauses double from `poll` up to this, for `retry_for` seconds.
MAX_RETRY_PAUSE = 8.0
DEFAULT_RETRY_FOR = 120.0

_Model = TypeVar("_Model", bound=BaseModel)
_T = TypeVar("_T")


@dataclass(frozen=True)
class LogRead:
    """A piece of a task's log, and where it sits."""

    data: bytes
    offset: int  # where ``data`` starts in the log
    size: int  # the log's size when read
    task: str | None  # ROLE/INDEX of the task shown; None before the task ran


class TrainyardError(Exception):
    """The server refused a request; ``message`` says why, ``errors`` lists field paths."""

    def __init__(self, message: str, *, status: int | None = None,
                 errors: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.errors = errors or []


class ServerUnreachable(TrainyardError):
    """No answer from the server at all: refused, timed out, or the connection was lost."""


class ServerError(TrainyardError):
    """The server (or a proxy before it) failed with a 5xx: often passing, e.g. a restart."""


class AuthError(TrainyardError):
    """A missing or invalid token (401), or a request the token's user may not make (403)."""


class WaitTimeout(TrainyardError):
    """``wait`` gave up before the job ended."""


class UsageError(TrainyardError, ValueError):
    """An argument the SDK cannot send (a URL that is not http(s), a job id that is not a
    number, a job file that cannot be read); nothing reached the server."""


def _job_id(job_id: object) -> int:
    if isinstance(job_id, bool) or not isinstance(job_id, int):
        raise UsageError(f"a job id is a whole number, like 12 (got {job_id!r})")
    return job_id


def _job_file_body(job: object, content_type: str | None) -> tuple[bytes, str]:
    """The bytes to send for ``job`` (see `JobFile`), and their media type."""
    if isinstance(job, Mapping):
        try:
            return json.dumps(dict(job), allow_nan=False).encode(), "application/json"
        except (TypeError, ValueError) as exc:
            raise UsageError(f"the job mapping cannot be sent as JSON: {exc}") from exc
    path: Path | None = None
    if isinstance(job, os.PathLike):
        path = Path(job)
    elif isinstance(job, str) and "\n" not in job and "\x00" not in job:
        looks_like_one = job.strip().endswith(_JOB_FILE_SUFFIXES) or Path(job).expanduser().is_file()
        path = Path(job).expanduser() if looks_like_one else None
    if path is not None:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise UsageError(f"cannot read job file {str(path)!r}: {exc.strerror or exc}") from exc
        return data, content_type or ("application/json" if path.suffix == ".json" else "application/yaml")
    if isinstance(job, str):
        return job.encode(), content_type or "application/yaml"
    if isinstance(job, bytes):
        return job, content_type or "application/yaml"
    raise UsageError("submit takes a job file: a path, the file's YAML or JSON text, or the job as a dict "
                     f"(got {type(job).__name__})")


class Client:
    """A connection to one Trainyard server as one user; each method is one API call.

    ``Client()`` finds the server and token as the ``yard`` CLI does: ``TRAINYARD_URL`` and
    ``TRAINYARD_TOKEN``, else ``$TRAINYARD_HOME/client.json`` (written by ``yard up``). Given
    a ``url``, the client uses that server with exactly the ``token`` given (no token from the
    environment goes to a server it was not meant for). Use it as a context manager, or
    ``close()`` it. Failures raise `TrainyardError` (or one of its kinds).
    """

    def __init__(self, url: str | None = None, token: str | None = None, *, timeout: float = 30.0) -> None:
        if url is None:
            config = load_config()
            url, token = config.url, token if token is not None else config.token
        if not isinstance(url, str):
            raise UsageError(f"url is the server's address, like http://127.0.0.1:8642 (got {url!r})")
        if token is not None and (not isinstance(token, str) or not token.isprintable() or not token.isascii()):
            raise UsageError("token is the API token text (ty_…), as `yard token create` prints it")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise UsageError(f"timeout is a number of seconds above 0 (got {timeout!r})")
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL as exc:
            raise UsageError(f"{url!r} is not a URL ({exc}); give the server's address, like "
                             "http://127.0.0.1:8642") from exc
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise UsageError(f"{url!r} is not an http(s) address; give the server's, like http://127.0.0.1:8642")
        self.url = url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.url + "/api/v1",
            headers={"Authorization": f"Bearer {token}"} if token else {},
            timeout=timeout,
        )

    @classmethod
    def from_config(cls, config: ClientConfig | None = None) -> Client:
        """A client for the server and token in ``config`` (default: as ``Client()`` finds them)."""
        config = config or load_config()
        return cls(config.url, config.token)

    def close(self) -> None:
        """Close the connections; the client cannot be used after."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------------------

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TimeoutException as exc:
            raise ServerUnreachable(f"the Trainyard server at {self.url} did not answer in time ({exc!r}); "
                                    "it may be overloaded, or a firewall drops the connection") from exc
        except httpx.TransportError as exc:
            raise ServerUnreachable(f"cannot reach the Trainyard server at {self.url} ({exc}); "
                                    "is `yard up` running, and is TRAINYARD_URL right?") from exc
        except (httpx.HTTPError, httpx.InvalidURL, TypeError, ValueError) as exc:
            raise UsageError(f"cannot send {method} {path}: {exc}") from exc
        self._raise_for(response)
        return response

    def _raise_for(self, response: httpx.Response) -> None:
        if response.is_success:
            return
        try:
            body = response.json()
            message, errors = body.get("detail") or response.reason_phrase, body.get("errors") or []
        except (ValueError, AttributeError):  # not JSON, or JSON that is not Trainyard's error body
            message, errors = response.text or response.reason_phrase, []
        status = response.status_code
        cls = AuthError if status in (401, 403) else ServerError if status >= 500 else TrainyardError
        raise cls(str(message), status=status, errors=errors if isinstance(errors, list) else [])

    def _answer(self, model: type[_Model], response: httpx.Response) -> _Model:
        """The response as ``model``, or a `TrainyardError` if it is not one (another service?)."""
        return self._parse(model.model_validate_json, response)

    def _parse(self, parse: Callable[[bytes], _T], response: httpx.Response) -> _T:
        try:
            return parse(response.content)
        except ValidationError as exc:
            raise TrainyardError(f"{self.url} answered {response.request.method} {response.request.url.path} with "
                                 "something that is not a Trainyard answer; is TRAINYARD_URL the Trainyard server, "
                                 f"and of this version? ({exc.error_count()} problems)",
                                 status=response.status_code) from exc

    # -- jobs -----------------------------------------------------------------------------

    @overload
    def submit(self, job: JobFile, *, content_type: str | None = ...,
               dry_run: Literal[False] = False) -> SubmitResult: ...

    @overload
    def submit(self, job: JobFile, *, content_type: str | None = ...,
               dry_run: Literal[True]) -> DryRunResult: ...

    @overload
    def submit(self, job: JobFile, *, content_type: str | None = ...,
               dry_run: bool) -> SubmitResult | DryRunResult: ...

    def submit(self, job: JobFile, *, content_type: str | None = None,
               dry_run: bool = False) -> SubmitResult | DryRunResult:
        """Submit a job; returns the new job's `SubmitResult` (its ``id``, ``state``, warnings).

        ``job`` is a path to a job file (``Path("train.yaml")``, or ``"train.yaml"``), the
        file's YAML or JSON text, or the job as a dict. ``content_type`` overrides the media
        type sent (default: JSON for a dict or a .json file, else YAML). With ``dry_run`` only
        validate it: a `DryRunResult` shows the job as Trainyard would run it (secrets masked).
        A refused job raises `TrainyardError` whose ``errors`` name the fields.
        """
        content, media_type = _job_file_body(job, content_type)
        response = self._request(
            "POST", "/jobs", content=content, headers={"Content-Type": media_type},
            params={"dryRun": "true"} if dry_run else None,
        )
        if dry_run:
            return self._answer(DryRunResult, response)
        return self._answer(SubmitResult, response)

    def clone(self, job_id: int, *, job: JobFile | None = None, name: str | None = None,
              vc: str | None = None, priority: str | None = None) -> SubmitResult:
        """Submit a copy of one of your jobs (an admin: anyone's), its secrets kept.

        The server keeps secrets and shows them masked (``******``); a clone runs with the
        original's. ``job`` replaces the whole job file (as `submit` takes it, e.g. the
        ``spec`` of `job()`, edited): values in it still masked are filled from the original.
        ``name``, ``vc`` and ``priority`` change just those.
        """
        params = {k: v for k, v in dict(name=name, vc=vc, priority=priority).items() if v is not None}
        content, headers = b"", {}
        if job is not None:
            content, media_type = _job_file_body(job, None)
            headers = {"Content-Type": media_type}
        response = self._request("POST", f"/jobs/{_job_id(job_id)}/clone", content=content, headers=headers,
                                 params=params)
        return self._answer(SubmitResult, response)

    def jobs(self, *, state: str | None = None, user: str | None = None, vc: str | None = None,
             limit: int = 50, before: int | None = None) -> JobPage:
        """A page of jobs, newest first (a user sees their own; an admin, everyone's).

        ``state`` is comma-separated states (``"WAITING,RUNNING"``); ``user`` and ``vc``
        filter by owner and virtual cluster. Pass the page's ``next`` as ``before`` (with the
        same filters) for the next page; ``next`` is None on the last.
        """
        params = {k: v for k, v in dict(state=state, user=user, vc=vc, limit=limit, before=before).items()
                  if v is not None}
        return self._answer(JobPage, self._request("GET", "/jobs", params=params))

    def job(self, job_id: int) -> JobDetail:
        """One job: state, attempts and their tasks, placement, events, its spec (secrets masked)."""
        return self._answer(JobDetail, self._request("GET", f"/jobs/{_job_id(job_id)}"))

    def stop(self, job_id: int) -> JobDetail:
        """Stop a job: a waiting one at once, a running one with SIGTERM, then SIGKILL after
        its grace period. Returns the job as it is now (STOPPING until its tasks end)."""
        return self._answer(JobDetail, self._request("POST", f"/jobs/{_job_id(job_id)}/stop"))

    def read_log(self, job_id: int, *, task: str | None = None, attempt: int | None = None,
                 offset: int | None = None, tail: int | None = None) -> LogRead:
        """A task's log (default: the first task of the latest attempt), with which task it is."""
        params = {k: v for k, v in dict(task=task, attempt=attempt, offset=offset, tail=tail).items()
                  if v is not None}
        response = self._request("GET", f"/jobs/{_job_id(job_id)}/logs", params=params)
        return LogRead(
            data=response.content,
            offset=int(response.headers.get(LOG_OFFSET_HEADER, 0)),
            size=int(response.headers.get(LOG_SIZE_HEADER, len(response.content))),
            task=response.headers.get(LOG_TASK_HEADER),
        )

    def logs(self, job_id: int, *, task: str | None = None, attempt: int | None = None,
             offset: int | None = None, tail: int | None = None) -> bytes:
        """The bytes of `read_log`."""
        return self.read_log(job_id, task=task, attempt=attempt, offset=offset, tail=tail).data

    def follow_logs(self, job_id: int, *, task: str | None = None, attempt: int | None = None,
                    tail: int | None = None) -> Iterator[bytes]:
        """A task's log as it grows, chunk by chunk, until the task ends (like ``tail -f``)."""
        params: dict[str, Any] = {k: v for k, v in dict(task=task, attempt=attempt, tail=tail).items()
                                  if v is not None}
        params["follow"] = "true"
        try:
            with self._http.stream("GET", f"/jobs/{_job_id(job_id)}/logs", params=params,
                                   timeout=None) as response:
                if not response.is_success:
                    response.read()
                    self._raise_for(response)
                yield from response.iter_bytes()
        except httpx.TransportError as exc:
            raise ServerUnreachable(f"lost the Trainyard server at {self.url} ({exc})") from exc

    def wait(self, job_id: int, *, timeout: float | None = None, poll: float = 0.5,
             retry_for: float = DEFAULT_RETRY_FOR,
             on_retry: Callable[[TrainyardError, float], None] | None = None) -> JobDetail:
        """Block until the job has ended; returns the job (check its ``state``).

        Asks every ``poll`` seconds. Raises `WaitTimeout` after ``timeout`` seconds (None:
        no limit). When the server cannot be reached or fails with a 5xx (say, it restarts),
        asks again after pauses that double up to 8 s, for at most ``retry_for`` seconds of
        such failures in a row, calling ``on_retry(error, pause)`` before each pause; then
        raises the last error. ``retry_for=0`` raises it at once.
        """
        _job_id(job_id)
        deadline = None if timeout is None else time.monotonic() + timeout
        failing_since: float | None = None
        failures = 0
        while True:
            try:
                job = self.job(job_id)
            except (ServerUnreachable, ServerError) as exc:
                now = time.monotonic()
                failing_since = now if failing_since is None else failing_since
                left = retry_for - (now - failing_since)
                if deadline is not None:
                    if now >= deadline:
                        raise WaitTimeout(f"job {job_id}: gave up after {timeout:g} s, with the server not "
                                          f"answering ({exc.message})") from exc
                    left = min(left, deadline - now)
                if left <= 0:
                    raise
                pause = min(poll * 2**failures, MAX_RETRY_PAUSE, left)
                failures += 1
                if on_retry is not None:
                    on_retry(exc, pause)
                time.sleep(pause)
                continue
            failing_since, failures = None, 0
            if job.state.is_final:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"job {job_id} is still {job.state} after {timeout:g} s")
            time.sleep(poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic())))

    # -- cluster and users ----------------------------------------------------------------

    def nodes(self) -> list[NodeView]:
        """The cluster's nodes: their GPUs, CPUs and memory, and what is allocated on them."""
        return self._parse(_NODES.validate_json, self._request("GET", "/nodes"))

    def healthz(self) -> dict[str, str]:
        """The server's health (``{"status": "ok", …}``); needs no token."""
        return self._parse(_HEALTH.validate_json, self._request("GET", "/healthz"))

    def me(self) -> UserView:
        """The user the token belongs to."""
        return self._answer(UserView, self._request("GET", "/me"))

    def create_user(self, name: str, *, admin: bool = False) -> UserView:
        """Create a user (admin only); give them a token with `create_token`."""
        return self._answer(UserView, self._request("POST", "/users", json={"name": name, "admin": admin}))

    def users(self) -> list[UserView]:
        """Every user (admin only)."""
        return self._parse(_USERS.validate_json, self._request("GET", "/users"))

    # -- administration -------------------------------------------------------------------

    def vcs(self) -> list[VcView]:
        """Virtual clusters: quota, used, borrowed and waiting (a user sees the ones they may use)."""
        return self._parse(_VCS.validate_json, self._request("GET", "/vcs"))

    def create_vc(self, name: str, *, gpus: int, model: str | None = None,
                  priority_preemption: bool = True) -> VcView:
        """Create a virtual cluster guaranteed ``gpus`` GPUs (of ``model``, default any) (admin)."""
        body = {"name": name, "gpus": gpus, "model": model, "priorityPreemption": priority_preemption}
        return self._answer(VcView, self._request("POST", "/vcs", json=body))

    def set_vc_quota(self, name: str, *, gpus: int, model: str | None = None) -> VcView:
        """Set a virtual cluster's guaranteed GPUs of one model (0 removes the model) (admin)."""
        return self._answer(VcView, self._request("PUT", f"/vcs/{name}/quota", json={"gpus": gpus, "model": model}))

    def grant_vc(self, name: str, grantee: str) -> VcView:
        """Let a user, or ``@group``, submit to a virtual cluster (admin)."""
        return self._answer(VcView, self._request("POST", f"/vcs/{name}/grants", json={"grantee": grantee}))

    def groups(self) -> list[GroupView]:
        """Groups and their members (admin)."""
        return self._parse(_GROUPS.validate_json, self._request("GET", "/groups"))

    def create_group(self, name: str) -> GroupView:
        """Create a group of users (admin)."""
        return self._answer(GroupView, self._request("POST", "/groups", json={"name": name}))

    def add_member(self, group: str, user: str) -> GroupView:
        """Add a user to a group (admin)."""
        return self._answer(GroupView, self._request("POST", f"/groups/{group}/members", json={"user": user}))

    def quotas(self) -> list[UserQuotaView]:
        """Every per-user GPU quota (admin)."""
        return self._parse(_QUOTAS.validate_json, self._request("GET", "/quotas"))

    def set_quota(self, user: str, *, priority: str, gpus: float | None) -> list[UserQuotaView]:
        """At most ``gpus`` GPUs for ``user`` at ``priority`` (None removes the limit) (admin)."""
        response = self._request("PUT", f"/quotas/{user}", json={"priority": priority, "gpus": gpus})
        return self._parse(_QUOTAS.validate_json, response)

    def cordon(self, node: str, *, cordoned: bool = True) -> NodeView:
        """Place nothing new on a node (``cordoned=False``: allow it again) (admin)."""
        return self._answer(NodeView, self._request("POST", f"/nodes/{node}/{'cordon' if cordoned else 'uncordon'}"))

    def create_token(self, *, user: str | None = None, name: str = "") -> TokenResponse:
        """A new API token, for yourself or (admin) for ``user``; its text is shown only now."""
        return self._answer(TokenResponse, self._request("POST", "/tokens", json={"user": user, "name": name}))
