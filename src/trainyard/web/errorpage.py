"""How a refusal is shown: a browser's page gets the portal's error page, anything else
Trainyard's JSON error (``{"detail", "errors"}``).

The page itself is the portal's (its templates and frame); the assembly (``api/app.py``)
puts the portal's renderer on the app context, so that the API's routes that a browser
opens too (the port proxy, the sessions' way in) answer it with a page without importing
the portal.
"""

from __future__ import annotations

from typing import Protocol

from fastapi import Request
from fastapi.responses import Response

STATIC_PATH = "/static"
# Paths that are not the portal's: their errors stay JSON.
_NOT_PAGES = ("/api/", "/metrics", "/docs", STATIC_PATH + "/")


class ErrorPage(Protocol):
    """The page for a refusal; with ``retry_after`` (seconds: what was asked for is on its
    way), a page that reloads itself after it, and says so."""

    def __call__(self, request: Request, status: int, message: str, retry_after: int | None = None) -> Response: ...


def is_page(request: Request) -> bool:
    """Whether ``request`` is for one of the portal's pages (a refusal is then a page)."""
    return not request.url.path.startswith(_NOT_PAGES)
