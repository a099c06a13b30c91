"""HTTP routes for sweeps: submit, list, show, stop, clone. Parsing and permissions only
(``services/sweeps.py`` does the rest)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from trainyard.api.deps import current_user
from trainyard.api.openapi import JOB_FILE_BODY, errors
from trainyard.api.routers.jobs import IdempotencyKey, WorkdirDigest, _answered, _media_type, _read_limited
from trainyard.schemas.sweeps import SweepDetail, SweepPage, SweepStopResult
from trainyard.services import idempotency
from trainyard.services import sweeps as sweep_service
from trainyard.services.submission import Keyed
from trainyard.spec.loading import load_document
from trainyard.store.rows import UserRow
from trainyard.web.bodies import MAX_ID, BodyRoute
from trainyard.web.context import AppContext, context

router = APIRouter(prefix="/sweeps", tags=["sweeps"], route_class=BodyRoute)

User = Annotated[UserRow, Depends(current_user)]
SweepId = Annotated[int, Path(ge=1, le=MAX_ID, description="The sweep's id")]
Ctx = Annotated[AppContext, Depends(context)]


@router.post("", status_code=201, openapi_extra=JOB_FILE_BODY, response_model=None,
             responses={201: {"model": SweepDetail}, **errors(401, 403, 404, 413, 422)})
async def submit_sweep(request: Request, user: User, ctx: Ctx, idempotency_key: IdempotencyKey = None,
                       workdir: WorkdirDigest = None) -> Response:
    """Submit a job file with a ``sweep`` section: one job per point of its grid or list, all
    made or none, each in the working directory ``workdir`` names (as for a job). With an
    ``Idempotency-Key``, a retry answers the first sweep again."""
    key = idempotency.parse_key(idempotency_key)
    body = await _read_limited(request)
    media_type = _media_type(request)
    keyed = Keyed(key, idempotency.fingerprint("POST", "/sweeps", media_type,
                                               {} if workdir is None else {"workdir": workdir}, body))
    document = load_document(body, content_type="json" if media_type.endswith("json") else "yaml")
    if workdir is not None and isinstance(document, dict):
        document = {**document, "workdir": workdir}
    return _answered(await run_in_threadpool(sweep_service.submit, ctx, user, document, keyed))


@router.get("", response_model=SweepPage, responses=errors(401, 422))
def list_sweeps(
    user: User,
    ctx: Ctx,
    owner: Annotated[str | None, Query(alias="user", max_length=64, description="Only this user's (admins)")] = None,
    limit: Annotated[int, Query(ge=1, le=sweep_service.MAX_PAGE)] = 50,
    before: Annotated[int | None, Query(ge=1, le=MAX_ID, description="Cursor: the page's `next`")] = None,
) -> SweepPage:
    """Your sweeps, newest first (an admin: everyone's)."""
    return sweep_service.list_sweeps(ctx, user, user=owner, limit=limit, before=before)


@router.get("/{sweep_id}", response_model=SweepDetail, responses=errors(401, 404, 422))
def show_sweep(sweep_id: SweepId, user: User, ctx: Ctx) -> SweepDetail:
    """The sweep and each of its jobs: index, parameters, state and the sweep's metric."""
    return sweep_service.show_sweep(ctx, user, sweep_id)


@router.post("/{sweep_id}/stop", response_model=SweepStopResult, responses=errors(401, 404, 409, 422))
def stop_sweep(sweep_id: SweepId, user: User, ctx: Ctx) -> SweepStopResult:
    """Stop every job of the sweep that has not ended, as one."""
    return sweep_service.stop_sweep(ctx, user, sweep_id)


@router.post("/{sweep_id}/clone", status_code=201, response_model=None,
             responses={201: {"model": SweepDetail}, **errors(401, 403, 404, 422)})
async def clone_sweep(sweep_id: SweepId, user: User, ctx: Ctx, idempotency_key: IdempotencyKey = None) -> Response:
    """Submit the sweep again, as you: the same job file, its secrets kept on the server."""
    key = idempotency.parse_key(idempotency_key)
    keyed = Keyed(key, idempotency.fingerprint("POST", f"/sweeps/{sweep_id}/clone", "", {}, b""))
    return _answered(await run_in_threadpool(sweep_service.clone_sweep, ctx, user, sweep_id, keyed))
