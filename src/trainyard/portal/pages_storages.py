"""The storages page: a user sees the storages they may mount (``home`` and their groups'
``@group`` storages too, where enabled) with their access; an admin sees every storage with
every grant, and creates, grants, revokes and deletes them.

Every change calls the use case ``api/routers/storages.py`` calls
(``services/cluster_actions.py``), so a page can do nothing the same user's token could not;
a refusal shows on the page with its status (taking back a grant or deleting a storage that
jobs mount offers to do it anyway, stopping them).
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import Response

from trainyard.portal.auth import AdminAction, Page, Viewer
from trainyard.portal.changes import refusal_values, removal_notice
from trainyard.portal.templating import render
from trainyard.services import account_actions, cluster_actions
from trainyard.services.errors import ServiceError
from trainyard.web.bodies import PathName
from trainyard.web.context import AppContext, context

router = APIRouter()

Ctx = Annotated[AppContext, Depends(context)]
Flag = Annotated[bool, Form()]
Grantee = Annotated[str, Form(max_length=65)]


def _page(request: Request, viewer: Viewer, ctx: AppContext, *, notice: str | None = None,
          failed: ServiceError | None = None, form: dict[str, str] | None = None,
          retry: dict[str, str] | None = None) -> Response:
    storages = cluster_actions.storage_views(ctx, viewer.user)
    people = [u.name for u in account_actions.users(ctx)] if viewer.user.is_admin else []
    groups = [g.name for g in cluster_actions.groups(ctx)] if viewer.user.is_admin else []
    return render(request, "storages.html", user=viewer.user, web_session=viewer.web_session,
                  status_code=failed.status if failed else 200, storages=storages, people=people, groups=groups,
                  notice=notice, form=form or {}, **refusal_values(failed, retry))


@router.get("/storages")
def storages_page(request: Request, viewer: Page, ctx: Ctx) -> Response:
    return _page(request, viewer, ctx)


@router.post("/storages")
def create(request: Request, viewer: AdminAction, ctx: Ctx, name: Annotated[str, Form(max_length=64)],
           path: Annotated[str, Form(max_length=4096)], kind: Annotated[str, Form(max_length=32)] = "",
           description: Annotated[str, Form(max_length=1000)] = "", read_only: Flag = False) -> Response:
    name = name.strip()
    try:
        cluster_actions.create_storage(ctx, name, path.strip(), read_only=read_only, kind=kind.strip(),
                                       description=description.strip())
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc,
                     form={"name": name, "path": path, "kind": kind, "description": description})
    return _page(request, viewer, ctx, notice=f"created storage {name}; grant it to let users mount it")


@router.post("/storages/{name}/grants")
def grant(request: Request, name: PathName, viewer: AdminAction, ctx: Ctx, grantee: Grantee,
          read_only: Flag = False) -> Response:
    grantee = grantee.strip()
    try:
        cluster_actions.grant_storage(ctx, name, grantee, read_only=read_only)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc)
    return _page(request, viewer, ctx,
                 notice=f"{grantee} may mount {name} {'read-only' if read_only else 'read-write'}")


@router.post("/storages/{name}/grants/revoke")
def revoke(request: Request, name: PathName, viewer: AdminAction, ctx: Ctx, grantee: Grantee,
           force: Flag = False) -> Response:
    try:
        result = cluster_actions.revoke_storage_grant(ctx, viewer.user, name, grantee, force=force)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc,
                     retry={"action": f"/storages/{quote(name)}/grants/revoke", "grantee": grantee})
    return _page(request, viewer, ctx, notice=removal_notice(result))


@router.post("/storages/{name}/delete")
def delete(request: Request, name: PathName, viewer: AdminAction, ctx: Ctx, force: Flag = False) -> Response:
    try:
        result = cluster_actions.delete_storage(ctx, viewer.user, name, force=force)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc, retry={"action": f"/storages/{quote(name)}/delete"})
    return _page(request, viewer, ctx, notice=removal_notice(result))
