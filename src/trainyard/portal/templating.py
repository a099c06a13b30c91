"""The portal's templates: Jinja2 with every value escaped, the page frame's context (who
is signed in, their form secret, the navigation), and the headers every page carries.

Pages are plain server-rendered HTML; htmx swaps parts of them and uPlot draws charts,
both vendored in ``static/vendor`` (versions and licences in ``static/vendor/README.md``).
Nothing runs inline: the Content-Security-Policy allows scripts and styles from this
server only, so a value that slipped through escaping still could not run.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape

from trainyard.store.rows import UserRow, WebSessionRow

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}

# A page with a terminal (the job page of a running job, to its owner): xterm.js sizes and
# colours its rows through <style> elements it writes, which 'self' refuses. Scripts stay
# this server's alone; an injected style still needs a place in the page that escaping
# leaves none of (docs/security.md).
TERMINAL_PAGE_HEADERS = {
    "Content-Security-Policy": SECURITY_HEADERS["Content-Security-Policy"].replace(
        "style-src 'self';", "style-src 'self' 'unsafe-inline';"),
}

# (path, label, admins only)
NAVIGATION = (
    ("/", "Home", False),
    ("/jobs", "Jobs", False),
    ("/submit", "Submit", False),
    ("/cluster", "Cluster", False),
    ("/vcs", "VCs", False),
    ("/environments", "Environments", False),
    ("/storages", "Storages", False),
    ("/datasets", "Datasets", False),
    ("/images", "Images", False),
    ("/notebooks", "Notebooks", False),
    ("/usage", "Usage", False),
    ("/users", "Users", True),
)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes}:{secs:02d}"


def _when(moment: datetime | None) -> str:
    if moment is None:
        return "–"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def _bytes(size: float | None) -> str:
    if size is None:
        return "–"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"


def _number(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "n/a"
    return f"{value:.{digits}f}".rstrip("0").rstrip(".") if digits else f"{value:.0f}"


def _percent(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f} %"


environment = Environment(
    loader=FileSystemLoader(TEMPLATES),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
environment.filters.update(duration=_duration, when=_when, bytes=_bytes, number=_number, percent=_percent)


def render(
    request: Request,
    template: str,
    *,
    user: UserRow | None = None,
    web_session: WebSessionRow | None = None,
    status_code: int = 200,
    headers: dict[str, str] | None = None,
    **values: Any,
) -> HTMLResponse:
    """The page ``template`` with the frame's values; a fragment template (htmx) gets the
    same values and no frame of its own."""
    page = environment.get_template(template).render(
        request=request,
        path=request.url.path,
        user=user,
        csrf=web_session.csrf_token if web_session is not None else "",
        navigation=[(href, label) for href, label, admin in NAVIGATION if not admin or (user and user.is_admin)],
        **values,
    )
    return HTMLResponse(page, status_code=status_code, headers={**SECURITY_HEADERS, **(headers or {})})
