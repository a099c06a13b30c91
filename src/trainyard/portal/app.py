"""The web portal, served by the same ``yard up`` process as the API: its pages, its static
files, and the HTML answers for the signed-out, the forbidden and the missing."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from trainyard.portal import (
    pages_account,
    pages_cluster,
    pages_datasets,
    pages_environments,
    pages_files,
    pages_home,
    pages_images,
    pages_job,
    pages_jobs,
    pages_notebooks,
    pages_notices,
    pages_storages,
    pages_submit,
    pages_sweeps,
    pages_usage,
    pages_users,
    pages_vcs,
)
from trainyard.portal.auth import CrossSiteRefused, PageForbidden, SignInRequired
from trainyard.portal.templating import SECURITY_HEADERS, STATIC, render
from trainyard.web.callers import sign_in_url
from trainyard.web.errorpage import STATIC_PATH


def error_page(request: Request, status: int, message: str, retry_after: int | None = None) -> HTMLResponse:
    """The portal's page for a refusal; with ``retry_after`` (seconds: what was asked for is
    on its way), the page reloads itself after it, and says so."""
    titles = {400: "Bad request", 403: "Not allowed", 404: "Not found", 409: "Conflict", 413: "Too large",
              422: "Invalid", 429: "Too many tries", 503: "Not ready yet"}
    page = render(request, "error.html", status_code=status, title=titles.get(status, "Error"), message=message,
                  refresh=retry_after)
    if retry_after is not None:
        page.headers["Retry-After"] = str(retry_after)
    return page


def install(app: FastAPI) -> None:
    app.mount(STATIC_PATH, StaticFiles(directory=STATIC), name="static")
    for module in (pages_account, pages_home, pages_jobs, pages_job, pages_files, pages_submit, pages_cluster,
                   pages_vcs, pages_environments, pages_storages, pages_datasets, pages_images, pages_notebooks,
                   pages_users, pages_usage, pages_sweeps, pages_notices):
        app.include_router(module.router, include_in_schema=False)

    @app.exception_handler(SignInRequired)
    async def _sign_in(request: Request, exc: SignInRequired) -> Response:
        if request.headers.get("hx-request"):  # htmx: send the whole page to the sign-in form
            return Response(status_code=401, headers={"HX-Redirect": sign_in_url(exc.next_path)})
        if request.method != "GET":
            return error_page(request, 401, "you are signed out: sign in again, then repeat what you did")
        return RedirectResponse(sign_in_url(exc.next_path), status_code=303, headers=SECURITY_HEADERS)

    @app.exception_handler(PageForbidden)
    async def _forbidden(request: Request, exc: PageForbidden) -> Response:
        return error_page(request, 403, exc.message)

    @app.exception_handler(CrossSiteRefused)
    async def _cross_site(request: Request, exc: CrossSiteRefused) -> Response:
        return error_page(request, 403, exc.message)
