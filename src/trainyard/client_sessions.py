"""The SDK's interactive-session calls (``Client`` has them): start, list, show, renew and
stop JupyterLab sessions (``yard dev``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from trainyard.client_input import checked_id as _job_id
from trainyard.client_input import given
from trainyard.client_models import Model, Shape

if TYPE_CHECKING:
    import httpx

    from trainyard.schemas.sessions import SessionView

Reply = TypeVar("Reply")
_SESSION: Model[SessionView] = Model("sessions.SessionView")
_SESSIONS: Model[list[SessionView]] = Model("sessions.SessionView", many=True)


class SessionCalls:
    """Mixed into ``Client``: these use its ``_request`` and ``_parse``."""

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        raise NotImplementedError

    def _parse(self, shape: Shape[Reply], content: bytes) -> Reply:
        raise NotImplementedError

    def start_session(self, **request: Any) -> SessionView:
        """Start a JupyterLab session (``gpu``, ``image`` or ``environment``, ``storages``,
        ``hours``, ``virtualCluster``, ``priority``, ``cpu``, ``memoryMB``, ``name``): a job of
        yours; open ``url`` on the server once it runs."""
        body = given(**request)
        return self._parse(_SESSION, self._request("POST", "/sessions", json=body).content)

    def sessions(self, *, everyone: bool = False) -> list[SessionView]:
        """Your sessions, newest first (an admin's ``everyone``: all users')."""
        params = {"all": "true" if everyone else "false"}
        return self._parse(_SESSIONS, self._request("GET", "/sessions", params=params).content)

    def session(self, job_id: int) -> SessionView:
        """One of your sessions: its state, time left, idle time and kernels."""
        return self._parse(_SESSION, self._request("GET", f"/sessions/{_job_id(job_id)}").content)

    def renew_session(self, job_id: int, *, hours: float | None = None) -> SessionView:
        """Let the session live ``hours`` more from now (default: its own lifetime)."""
        body = {} if hours is None else {"hours": hours}
        return self._parse(_SESSION, self._request("POST", f"/sessions/{_job_id(job_id)}/renew", json=body).content)

    def stop_session(self, job_id: int) -> SessionView:
        """Stop a session; returns it as it is now (STOPPING, then STOPPED)."""
        return self._parse(_SESSION, self._request("DELETE", f"/sessions/{_job_id(job_id)}").content)
