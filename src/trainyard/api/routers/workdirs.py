"""HTTP routes for working directories sent with jobs: upload one, ask whether it is there.
The checks and the store are ``services/workdirs.py``'s; this reads the body, bounded."""

from __future__ import annotations

import tempfile
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Request
from starlette.concurrency import run_in_threadpool

from trainyard.api.deps import current_user
from trainyard.api.openapi import errors
from trainyard.schemas.workdirs import WorkdirLimits, WorkdirView
from trainyard.services import workdirs
from trainyard.store.rows import UserRow
from trainyard.web.context import AppContext, context

router = APIRouter(prefix="/workdirs", tags=["workdirs"])

User = Annotated[UserRow, Depends(current_user)]
Ctx = Annotated[AppContext, Depends(context)]
Digest = Annotated[str, Path(pattern=r"^sha256:[0-9a-f]{64}$", description="sha256:<hex> of its canonical tar")]
SPOOL_BYTES = 1 << 20  # an upload past this waits on disk, not in memory


def _wire_limit(ctx: AppContext) -> int:
    """The most bytes an upload may be on the wire: its files, plus the tar's headers."""
    return ctx.workdirs.max_bytes + ctx.workdirs.max_bytes // 8 + (4 << 20)


@router.put("", response_model=WorkdirView, responses=errors(401, 413, 422))
async def upload_workdir(request: Request, user: User, ctx: Ctx) -> WorkdirView:
    """Send a working directory: the body is a tar archive (gzip'd or not) of the folder's
    files, folders and inner symlinks. It is checked member by member, never extracted
    (422 naming the member for an absolute or ``..`` name, a link out of it, a hard link or
    a special file; for too many bytes, the biggest files), stored once per content, and
    answered with its ``digest``: the job file's ``workdir`` then names it."""
    limit = _wire_limit(ctx)
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as body:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _too_large(limit)
            body.write(chunk)
        body.seek(0)

        return await run_in_threadpool(workdirs.upload, ctx, user, body)


@router.get("/limits", response_model=WorkdirLimits, responses=errors(401))
def workdir_limits(user: User, ctx: Ctx) -> WorkdirLimits:
    """How big a working directory may be: a client packs within it, and names the biggest
    files of a folder past it before sending anything."""
    return WorkdirLimits(maxBytes=ctx.workdirs.max_bytes)


@router.get("/{digest}", response_model=WorkdirView, responses=errors(401, 404, 422))
def show_workdir(digest: Digest, user: User, ctx: Ctx) -> WorkdirView:
    """Your upload of this content (404 if you have none): a client asks before sending."""
    return workdirs.shown(ctx, user, digest)


def _too_large(limit: int) -> HTTPException:
    return HTTPException(413, f"the working directory's archive is larger than {limit >> 20} MiB, more than this "
                              "cluster takes; leave big files out with a .yardignore, or put data in a storage")
