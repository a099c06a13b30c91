"""The SDK's sweep calls (``Client`` has them): submit a job file with a ``sweep`` section,
list, show, follow, stop and clone a sweep. ``/api/v1/sweeps`` on the server."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from trainyard.client_errors import TrainyardError, UsageError, WaitTimeout
from trainyard.client_input import JobFile, given, job_file_body, new_key
from trainyard.client_models import Model, Shape
from trainyard.client_workdir import workdir_digest

if TYPE_CHECKING:
    import httpx

    from trainyard.schemas.sweeps import SweepDetail, SweepPage, SweepStopResult, SweepSummary

Reply = TypeVar("Reply")
_SWEEP: Model[SweepDetail] = Model("sweeps.SweepDetail")
_SWEEPS: Model[SweepPage] = Model("sweeps.SweepPage")
_SWEEP_STOP: Model[SweepStopResult] = Model("sweeps.SweepStopResult")
SUBMIT_RETRY_FOR = 30.0  # as ``Client.submit``'s


def _sweep_id(sweep_id: object) -> int:
    if isinstance(sweep_id, bool) or not isinstance(sweep_id, int):
        raise UsageError(f"a sweep id is a whole number, like 4 (got {sweep_id!r})")
    return sweep_id


class SweepCalls:
    """Mixed into ``Client``: these use its ``_request``, ``_submitting`` and ``_parse``."""

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        raise NotImplementedError

    def _submitting(self, path: str, retry_for: float, on_retry: Callable[[TrainyardError, float], None] | None,
                    **kwargs: Any) -> httpx.Response:
        raise NotImplementedError

    def _parse(self, shape: Shape[Reply], content: bytes) -> Reply:
        raise NotImplementedError

    def submit_sweep(self, job_file: JobFile, *, content_type: str | None = None,
                     idempotency_key: str | None = None, retry_for: float = SUBMIT_RETRY_FOR,
                     workdir: str | os.PathLike[str] | None = None,
                     on_retry: Callable[[TrainyardError, float], None] | None = None) -> SweepDetail:
        """Submit a job file with a ``sweep`` section (``{grid: {...}}`` or ``{list: [...]}``,
        optionally ``parallel`` and ``metric``): one job per point, all made or none. Taken
        as `Client.submit` takes a job file (``workdir`` too: every job runs in that folder),
        and made at most once as it is."""
        try:
            content, media_type = job_file_body(job_file, content_type)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        headers = {"Content-Type": media_type, "Idempotency-Key": idempotency_key or new_key()}
        sent = workdir_digest(self, job_file, workdir)  # type: ignore[arg-type]
        response = self._submitting("/sweeps", retry_for, on_retry, content=content, headers=headers,
                                    params=given(workdir=sent))
        return self._parse(_SWEEP, response.content)

    def sweeps(self, *, user: str | None = None, limit: int | None = None) -> Iterator[SweepSummary]:
        """Your sweeps, newest first (an admin: everyone's, or ``user``'s), page after page."""
        before: int | None = None
        left = limit
        while left is None or left > 0:
            params = given(user=user, before=before, limit=None if left is None else min(left, 200))
            page = self._parse(_SWEEPS, self._request("GET", "/sweeps", params=params).content)
            yield from page.items
            if left is not None:
                left -= len(page.items)
            if page.next is None:
                return
            before = page.next

    def sweep(self, sweep_id: int) -> SweepDetail:
        """The sweep and each job of it: index, parameters, state, metric."""
        return self._parse(_SWEEP, self._request("GET", f"/sweeps/{_sweep_id(sweep_id)}").content)

    def stop_sweep(self, sweep_id: int) -> SweepStopResult:
        """Stop every job of the sweep that has not ended."""
        return self._parse(_SWEEP_STOP, self._request("POST", f"/sweeps/{_sweep_id(sweep_id)}/stop").content)

    def clone_sweep(self, sweep_id: int, *, idempotency_key: str | None = None,
                    retry_for: float = SUBMIT_RETRY_FOR) -> SweepDetail:
        """Submit the sweep again, as you, its secrets kept on the server."""
        headers = {"Idempotency-Key": idempotency_key or new_key()}
        response = self._submitting(f"/sweeps/{_sweep_id(sweep_id)}/clone", retry_for, None, headers=headers)
        return self._parse(_SWEEP, response.content)

    def wait_sweep(self, sweep_id: int, *, timeout: float | None = None, poll: float = 2.0,
                   on_change: Callable[[SweepDetail], None] | None = None) -> SweepDetail:
        """Poll until every job of the sweep has ended; ``on_change`` sees each new state of
        it. WaitTimeout after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        last = None
        while True:
            sweep = self.sweep(sweep_id)
            if on_change is not None and sweep.model_dump(exclude={"createdAt"}) != last:
                on_change(sweep)
                last = sweep.model_dump(exclude={"createdAt"})
            if sweep.ended:
                return sweep
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"sweep {sweep_id} has not ended after {timeout:g} s")
            time.sleep(poll)
