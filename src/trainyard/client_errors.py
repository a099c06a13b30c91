"""What the Python SDK (``trainyard.client``, which re-exports them) raises: one base,
``TrainyardError``, with the server's message, status and field paths."""

from __future__ import annotations

from typing import Any


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
    number, a job file that cannot be read), or an answer that is not Trainyard's."""
