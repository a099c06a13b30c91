"""Interactive sessions (``yard dev``): how the site runs them, from its settings.

A session is a job of one task that runs JupyterLab on one of its allocated ports, reached
only through ``yard up``'s authenticated proxy at ``/sessions/<job id>/`` (SESSION_PREFIX);
``services/dev_sessions.py`` makes the job, ``controller/sessions.py`` ends it when its
lifetime has passed and reads how idle it is.
"""

from __future__ import annotations

from dataclasses import dataclass

SESSION_PREFIX = "/sessions"
SESSION_ROLE = "lab"  # the session job's one task role
SESSION_PORT = "lab"  # the port label JupyterLab listens on
TOKEN_SECRET = "jupyterToken"  # the job's secret holding JupyterLab's token


def session_path(job_id: int) -> str:
    """Where a session is opened, on ``yard up``'s own address (JupyterLab's base URL)."""
    return f"{SESSION_PREFIX}/{job_id}/"


@dataclass(frozen=True)
class SessionPolicy:
    """The site's rules for sessions (``Settings.session_*``)."""

    python: str | None = None  # a Python with JupyterLab on every node; None: none known
    hours: float = 24.0  # a session's lifetime unless it asks for another
    max_hours: float = 168.0  # the longest one start or renewal may ask for
    idle_report_minutes: float = 60.0
    idle_cull_minutes: float | None = None  # None: idle sessions are reported, never stopped
    check_interval_seconds: float = 60.0
    admin_access: bool = False  # admins may open others' sessions (with a token)


def jupyter_token(document: object) -> str | None:
    """JupyterLab's token, from a session job's stored document (its secrets)."""
    stored = document.get("secrets") if isinstance(document, dict) else None
    token = stored.get(TOKEN_SECRET) if isinstance(stored, dict) else None
    return token if isinstance(token, str) and token else None
