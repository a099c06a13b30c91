"""The FastAPI application: routers under ``/api/v1`` and one error format for every failure.

Every error answers ``{"detail": "<what is wrong and what to do>", "errors": [{"path",
"message"}]}`` with a 4xx status; an unexpected exception is logged and answered as a
500 with a generic message, never a traceback. A client that hangs up mid-request is
logged in one line and answered nothing.

This module is also where the one app is assembled: the API's routers and the portal's
pages (``portal.app.install``), on one app context (``web/context.py``). It is the only
module of ``api/`` that imports ``portal/``, and ``portal/`` imports nothing of ``api/``:
what both need lives below them, in ``web/``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import IntegrityError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm.exc import StaleDataError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match

from trainyard.api import openapi
from trainyard.api.routers import (
    admin,
    alerts,
    cluster,
    datasets,
    environments,
    files,
    history,
    images,
    jobs,
    metrics,
    notices,
    proxy,
    sessions,
    storages,
    sweeps,
    taskexec,
    usage,
    users,
    workdirs,
)
from trainyard.portal import app as portal
from trainyard.services.errors import ServiceError
from trainyard.spec.errors import SpecError
from trainyard.spec.plaindata import OversizedNumber
from trainyard.web.bodies import BodyError, printable
from trainyard.web.context import AppContext
from trainyard.web.errorpage import ErrorPage, is_page

log = logging.getLogger(__name__)


def _error(
    status: int, detail: str, errors: list[dict[str, str]] | None = None, headers: Mapping[str, str] | None = None
) -> JSONResponse:
    # A message may quote what the client sent; text UTF-8 cannot carry (a lone surrogate)
    # is written as its escape, so that answering an error never fails in turn.
    errors = [{k: printable(v) if isinstance(v, str) else v for k, v in e.items()} for e in errors or []]
    return JSONResponse({"detail": printable(detail), "errors": errors}, status_code=status, headers=headers)


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    yield
    client = app.state.ctx.proxy_client  # the proxy's connections to tasks
    if client is not None:
        await client.aclose()


def create_app(ctx: AppContext) -> FastAPI:
    app = FastAPI(
        title="Trainyard",
        summary="Share GPU machines for deep-learning training.",
        version="0.1.0",
        description="Errors always answer `{\"detail\": …, \"errors\": [{\"path\": …, \"message\": …}]}`. "
                    "Use **Authorize** with a token from `yard token create` (the admin's is in "
                    "`$TRAINYARD_HOME/client.json`).",
        openapi_url="/api/v1/openapi.json",
        docs_url=None,  # openapi.install serves /docs from the package, not from a CDN
        redoc_url=None,
        swagger_ui_oauth2_redirect_url=None,
        lifespan=_lifespan,
    )
    app.state.ctx = ctx
    for router in (jobs.router, users.router, cluster.router, admin.router, alerts.router, usage.router,
                   history.router, images.router, storages.router, environments.router, sessions.router,
                   sweeps.router, files.router, workdirs.router, notices.router, datasets.router):
        app.include_router(router, prefix="/api/v1")
    app.include_router(proxy.router)  # /proxy/jobs/… and the tunnels' WebSockets: full paths
    app.include_router(taskexec.router)  # the exec WebSocket (yard exec, yard shell, the portal's terminal)
    app.include_router(sessions.way_in)  # /sessions/<id>/…: JupyterLab sessions, through the proxy
    app.include_router(metrics.router)  # Prometheus' usual path, outside the versioned API
    openapi.install(app)
    portal.install(app)  # the web pages, at / (their errors are pages too)
    ctx.error_page = portal.error_page  # a browser's refusal, from the API's routes too

    def page_for(request: Request) -> ErrorPage | None:
        return ctx.error_page if is_page(request) else None

    @app.exception_handler(SpecError)
    async def _spec_error(_: Request, exc: SpecError) -> JSONResponse:
        errors = [{"path": e.path, "message": e.message} for e in exc.errors]
        return _error(422, "invalid job file:\n" + str(exc), errors)

    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError) -> Response:
        if (page := page_for(request)) is not None:
            return page(request, exc.status, exc.message)
        return _error(exc.status, exc.message, exc.details)

    @app.exception_handler(StaleDataError)
    async def _lost_race(_: Request, exc: StaleDataError) -> JSONResponse:
        return _error(409, "the job changed while this request ran (the scheduler moved it); try again")

    @app.exception_handler(IntegrityError)
    async def _same_name_at_once(request: Request, exc: IntegrityError) -> JSONResponse:
        # The services check names before inserting; only two requests creating the same
        # thing at the same moment get past that, and the database's constraint stops one.
        log.warning("conflicting write on %s %s: %s", request.method, request.url.path, exc.orig)
        return _error(409, "another request created or changed the same thing at the same time; "
                           "look at what is there now, then try again")

    @app.exception_handler(PoolTimeout)
    async def _busy(request: Request, _: PoolTimeout) -> Response:
        # Every database connection stayed in use for the pool's timeout (a burst far beyond
        # what the store writes): the request did nothing, and may simply be sent again.
        log.warning("no database connection free for %s %s: answered 503", request.method, request.url.path)
        return _error(503, "the server is busy (every database connection is in use); try again in a moment",
                      headers={"Retry-After": "1"})

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        errors = [
            {"path": ".".join(str(p) for p in e["loc"] if p not in ("body", "query", "path")),
             "message": _message(e)}
            for e in exc.errors()
        ]
        detail = "; ".join(f"{e['path']}: {e['message']}" for e in errors)
        if (page := page_for(request)) is not None:
            return page(request, 422, detail)
        return _error(422, detail, errors)

    @app.exception_handler(HTTPException)
    async def _http_error(request: Request, exc: HTTPException) -> Response:
        if (page := page_for(request)) is not None and exc.status_code in (404, 405):
            return page(request, exc.status_code, "there is no such page")
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(_allowed_methods(request))
        errors = exc.errors if isinstance(exc, BodyError) else None
        return _error(exc.status_code, str(exc.detail), errors, headers=headers or None)

    @app.exception_handler(ClientDisconnect)
    async def _client_gone(request: Request, _: ClientDisconnect) -> Response:
        # Nobody is left to read an answer and it is no server error: one line, and the status
        # proxies log for it (nginx's 499, "client closed request") in case anything records it.
        log.warning("client disconnected during %s %s", request.method, request.url.path)
        return Response(status_code=499)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        if (page := page_for(request)) is not None:
            return page(request, 500, "internal error; the server log has the details")
        return _error(500, "internal error; the server log has the details")

    return app


def _message(error: Any) -> str:
    """Pydantic's message, except for an integer literal too long to have been converted."""
    if isinstance(number := error.get("input"), OversizedNumber):
        return f"an integer of {number.digits} digits is too long"
    return str(error["msg"])


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this path (Starlette names only the first route's),
    found by asking the routes themselves, so that nested routers count too."""
    allowed = []
    for method in _METHODS:
        probe = {**request.scope, "method": method}
        if any(route.matches(dict(probe))[0] == Match.FULL for route in request.app.router.routes):
            allowed.append(method)
    return allowed
