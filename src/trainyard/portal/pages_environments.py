"""The environments page: the environments the signed-in user may run jobs in (their own,
those shared with a group of theirs, the base ones; an admin: all), each with its state and
the build job whose log says how its build went; a form that builds a new one from a pasted
requirements file; Delete for its owner (and admins).

Every change calls the use case ``api/routers/environments.py`` calls
(``services/cluster_actions.py``), with the same rules: another user's private environment
is not found, deleting one in use or being built is refused (and offered again with
``force``), one that others are built on is never deleted.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import Response
from pydantic import ValidationError

from trainyard.backends.base import EnvironmentStore
from trainyard.portal.auth import Action, Page, Viewer
from trainyard.portal.changes import refusal_values
from trainyard.portal.templating import render
from trainyard.schemas.environments import MAX_REQUIREMENTS_BYTES, CreateEnvironmentRequest
from trainyard.services import cluster_actions
from trainyard.services.environment_access import EnvironmentKind
from trainyard.services.errors import Invalid, ServiceError
from trainyard.web.bodies import PathName
from trainyard.web.context import AppContext, context

router = APIRouter()

Ctx = Annotated[AppContext, Depends(context)]


def _page(request: Request, viewer: Viewer, ctx: AppContext, *, notice: str | None = None,
          failed: ServiceError | None = None, form: dict[str, str] | None = None,
          retry: dict[str, str] | None = None) -> Response:
    envs = cluster_actions.environment_views(ctx, viewer.user)
    groups = cluster_actions.groups_of(ctx, viewer.user)
    bases = [e.name for e in envs if e.kind == EnvironmentKind.BASE and e.path is not None]
    return render(request, "environments.html", user=viewer.user, web_session=viewer.web_session,
                  status_code=failed.status if failed else 200, environments=envs, bases=bases, groups=groups,
                  can_build=isinstance(ctx.backend, EnvironmentStore), notice=notice, form=form or {},
                  max_requirements=MAX_REQUIREMENTS_BYTES, **_refusal(failed, retry))


def _refusal(failed: ServiceError | None, retry: dict[str, str] | None) -> dict[str, Any]:
    """The refusal's values; a deletion refused because the environment is in use (or being
    built) is the one ``force`` overcomes, so that one gets the button that repeats it."""
    values = refusal_values(failed, None)
    if failed is not None and retry is not None and any(d.get("message") == "in use" for d in failed.details):
        values["retry"] = retry
    return values


@router.get("/environments")
def environments_page(request: Request, viewer: Page, ctx: Ctx) -> Response:
    return _page(request, viewer, ctx)


@router.post("/environments")
def create(request: Request, viewer: Action, ctx: Ctx, name: Annotated[str, Form(max_length=64)],
           requirements: Annotated[str, Form(max_length=MAX_REQUIREMENTS_BYTES)],
           base: Annotated[str, Form(max_length=64)] = "", group: Annotated[str, Form(max_length=64)] = "") -> Response:
    """A custom environment, built as a job of the viewer's (``POST /environments`` with
    ``requirements``); base environments are declared with ``yard env create --path|--image``."""
    form = {"name": name, "requirements": requirements, "base": base, "group": group}
    try:
        try:
            wanted = CreateEnvironmentRequest(name=name.strip(), requirements=requirements.replace("\r\n", "\n"),
                                              base=base or None, group=group or None)
        except ValidationError as exc:  # the field and why, as the API says it
            details = [{"path": ".".join(map(str, e["loc"])) or "name", "message": e["msg"]} for e in exc.errors()]
            raise Invalid("; ".join(f"{d['path']}: {d['message']}" for d in details), details=details) from None
        view = cluster_actions.create_environment(ctx, viewer.user, wanted)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc, form=form)
    return _page(request, viewer, ctx, notice=f"environment {view.name} is being built by job {view.buildJobId}")


@router.post("/environments/{name}/delete")
def delete(request: Request, name: PathName, viewer: Action, ctx: Ctx,
           force: Annotated[bool, Form()] = False) -> Response:
    try:
        deleted = cluster_actions.delete_environment(ctx, viewer.user, name, force=force)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc, retry={"action": f"/environments/{quote(name)}/delete"})
    stopped = f"; stopped its build, job {', '.join(map(str, deleted.stopped_jobs))}" if deleted.stopped_jobs else ""
    return _page(request, viewer, ctx, notice=f"deleted environment {name}{stopped}")


