"""The Python SDK: a thin, typed-enough wrapper over Trainyard's REST API (httpx)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx

from trainyard.client.config import ClientConfig, load_config
from trainyard.core.states import FINAL_JOB_STATES

JsonObject = dict[str, Any]  # a JSON object from the API, as parsed


def _object(response: httpx.Response) -> JsonObject:
    body: JsonObject = response.json()
    return body


def _objects(response: httpx.Response) -> list[JsonObject]:
    body: list[JsonObject] = response.json()
    return body


class TrainyardError(Exception):
    """The server refused a request; ``message`` says why, ``errors`` lists field paths."""

    def __init__(self, message: str, *, status: int | None = None, errors: list[JsonObject] | None = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.errors = errors or []


class ServerUnreachable(TrainyardError):
    pass


class AuthError(TrainyardError):
    pass


class WaitTimeout(TrainyardError):
    pass


class Client:
    def __init__(self, url: str, token: str | None, *, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.url + "/api/v1",
            headers={"Authorization": f"Bearer {token}"} if token else {},
            timeout=timeout,
        )

    @classmethod
    def from_config(cls, config: ClientConfig | None = None) -> Client:
        config = config or load_config()
        return cls(config.url, config.token)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------------------

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ServerUnreachable(f"cannot reach the Trainyard server at {self.url} ({exc}); "
                                    "is `yard up` running, and is TRAINYARD_URL right?") from exc
        self._raise_for(response)
        return response

    def _raise_for(self, response: httpx.Response) -> None:
        if response.is_success:
            return
        try:
            body = response.json()
            message, errors = body.get("detail") or response.reason_phrase, body.get("errors") or []
        except ValueError:
            message, errors = response.text or response.reason_phrase, []
        cls = AuthError if response.status_code in (401, 403) else TrainyardError
        raise cls(str(message), status=response.status_code, errors=errors)

    # -- jobs -----------------------------------------------------------------------------

    def submit(
        self, job_file: str | bytes, *, content_type: str = "application/yaml", dry_run: bool = False
    ) -> JsonObject:
        response = self._request(
            "POST", "/jobs", content=job_file, headers={"Content-Type": content_type},
            params={"dryRun": "true"} if dry_run else None,
        )
        return _object(response)

    def jobs(self, *, state: str | None = None, user: str | None = None, vc: str | None = None,
             limit: int = 50, before: int | None = None) -> JsonObject:
        params = {k: v for k, v in dict(state=state, user=user, vc=vc, limit=limit, before=before).items()
                  if v is not None}
        return _object(self._request("GET", "/jobs", params=params))

    def job(self, job_id: int) -> JsonObject:
        return _object(self._request("GET", f"/jobs/{job_id}"))

    def stop(self, job_id: int) -> JsonObject:
        return _object(self._request("POST", f"/jobs/{job_id}/stop"))

    def logs(self, job_id: int, *, task: str | None = None, attempt: int | None = None,
             offset: int | None = None, tail: int | None = None) -> bytes:
        params = {k: v for k, v in dict(task=task, attempt=attempt, offset=offset, tail=tail).items()
                  if v is not None}
        return self._request("GET", f"/jobs/{job_id}/logs", params=params).content

    def follow_logs(self, job_id: int, *, task: str | None = None, attempt: int | None = None,
                    tail: int | None = None) -> Iterator[bytes]:
        params = {k: v for k, v in dict(task=task, attempt=attempt, tail=tail).items() if v is not None}
        params["follow"] = "true"
        try:
            with self._http.stream("GET", f"/jobs/{job_id}/logs", params=params, timeout=None) as response:
                if not response.is_success:
                    response.read()
                    self._raise_for(response)
                yield from response.iter_bytes()
        except httpx.TransportError as exc:
            raise ServerUnreachable(f"lost the Trainyard server at {self.url} ({exc})") from exc

    def wait(self, job_id: int, *, timeout: float | None = None, poll: float = 0.5) -> JsonObject:
        """Block until the job has ended; returns the job. Raises ``WaitTimeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job["state"] in FINAL_JOB_STATES:
                return job
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"job {job_id} is still {job['state']} after {timeout:g} s")
            time.sleep(poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic())))

    # -- cluster and users ----------------------------------------------------------------

    def nodes(self) -> list[JsonObject]:
        return _objects(self._request("GET", "/nodes"))

    def healthz(self) -> JsonObject:
        return _object(self._request("GET", "/healthz"))

    def me(self) -> JsonObject:
        return _object(self._request("GET", "/me"))

    def create_user(self, name: str, *, admin: bool = False) -> JsonObject:
        return _object(self._request("POST", "/users", json={"name": name, "admin": admin}))

    def users(self) -> list[JsonObject]:
        return _objects(self._request("GET", "/users"))

    # -- administration -------------------------------------------------------------------

    def vcs(self) -> list[JsonObject]:
        return _objects(self._request("GET", "/vcs"))

    def create_vc(
        self, name: str, *, gpus: int, model: str | None = None, priority_preemption: bool = True
    ) -> JsonObject:
        body = {"name": name, "gpus": gpus, "model": model, "priorityPreemption": priority_preemption}
        return _object(self._request("POST", "/vcs", json=body))

    def set_vc_quota(self, name: str, *, gpus: int, model: str | None = None) -> JsonObject:
        return _object(self._request("PUT", f"/vcs/{name}/quota", json={"gpus": gpus, "model": model}))

    def grant_vc(self, name: str, grantee: str) -> JsonObject:
        return _object(self._request("POST", f"/vcs/{name}/grants", json={"grantee": grantee}))

    def groups(self) -> list[JsonObject]:
        return _objects(self._request("GET", "/groups"))

    def create_group(self, name: str) -> JsonObject:
        return _object(self._request("POST", "/groups", json={"name": name}))

    def add_member(self, group: str, user: str) -> JsonObject:
        return _object(self._request("POST", f"/groups/{group}/members", json={"user": user}))

    def quotas(self) -> list[JsonObject]:
        return _objects(self._request("GET", "/quotas"))

    def set_quota(self, user: str, *, priority: str, gpus: float | None) -> list[JsonObject]:
        return _objects(self._request("PUT", f"/quotas/{user}", json={"priority": priority, "gpus": gpus}))

    def cordon(self, node: str, *, cordoned: bool = True) -> JsonObject:
        return _object(self._request("POST", f"/nodes/{node}/{'cordon' if cordoned else 'uncordon'}"))

    def create_token(self, *, user: str | None = None, name: str = "") -> JsonObject:
        return _object(self._request("POST", "/tokens", json={"user": user, "name": name}))
