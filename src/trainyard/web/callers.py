"""Who is calling: a bearer token (the CLI, the SDK, curl) or the portal's session cookie
(a browser), and the checks a browser's request passes — the names of the cookie and of
the form secret, the same-origin check, and where a signed-out browser signs in.

The API's dependency (``api/deps.py``) and the portal's (``portal/auth.py``) are built on
these, and so are the routes that take either (the port proxy, exec, the sessions' way in).
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit

from starlette.datastructures import Headers
from starlette.requests import HTTPConnection

from trainyard.services import web_sessions
from trainyard.services.auth import hash_token
from trainyard.services.task_access import Caller
from trainyard.web.context import AppContext

COOKIE = "trainyard_session"
CSRF_FIELD = "csrf"
CSRF_HEADER = "X-CSRF-Token"


def same_origin(request: HTTPConnection) -> bool:
    """A browser names the page a request comes from (Origin, else Referer); it must be this
    server. Neither header: not a browser's cross-site request (they send Origin on POST)."""
    source = request.headers.get("origin") or request.headers.get("referer")
    if not source or source == "null":
        return source is None
    parts = urlsplit(source)
    return parts.netloc == request.headers.get("host", request.url.netloc)


def sign_in_url(next_path: str) -> str:
    return "/signin?next=" + quote(next_path, safe="/")


def credential_key(headers: Headers, cookies: dict[str, str]) -> str | None:
    """What ``identify_caller`` authenticates a request by (a bearer token first, else the
    portal's cookie), as a key that names it without holding it: ``token:<SHA-256>`` or
    ``cookie:<SHA-256>``; None when the request carries neither."""
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return "token:" + hash_token(auth[7:].strip())
    cookie = cookies.get(COOKIE, "")
    return "cookie:" + hash_token(cookie) if cookie else None


def identify_caller(ctx: AppContext, headers: Headers, cookies: dict[str, str]) -> Caller | None:
    """The user behind a request's token or portal session; None when neither is valid."""
    credential = credential_key(headers, cookies)
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        user = ctx.tokens.user_for_token(auth[7:].strip())
        return Caller(user, False, credential or "") if user is not None and not user.disabled else None
    cookie = cookies.get(COOKIE, "")
    if not cookie:
        return None
    row = web_sessions.signed_in(ctx.db, cookie, clock=ctx.clock)
    if row is None or row.user.disabled:
        return None
    return Caller(row.user, True, credential or "")
