"""HTTP routes for a job's files: a folder's listing and a file's download (ranges), under
the job's directory or a task's working directory. Parsing and permissions only
(``services/job_files``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path, Query
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from trainyard.api.deps import current_user
from trainyard.api.openapi import errors
from trainyard.schemas.files import FileListing
from trainyard.services import job_files
from trainyard.store.rows import UserRow
from trainyard.web.bodies import MAX_ID
from trainyard.web.context import AppContext, context
from trainyard.web.downloads import file_response

router = APIRouter(prefix="/jobs", tags=["jobs"])

User = Annotated[UserRow, Depends(current_user)]
JobId = Annotated[int, Path(ge=1, le=MAX_ID, description="The job's id")]
Ctx = Annotated[AppContext, Depends(context)]
FilePath = Annotated[str, Query(max_length=4096, description="Relative to the directory, e.g. `out/result.json` "
                                                             "(plain names: no `..`, not absolute)")]
Task = Annotated[str | None, Query(max_length=80, description="ROLE/INDEX: that task's working directory; "
                                                              "default: the job's directory ($TRAINYARD_JOB_DIR)")]
Attempt = Annotated[int | None, Query(ge=0, le=MAX_ID, description="With `task`: the attempt (default: the latest)")]

DOWNLOAD_RESPONSE = {
    "description": "The file's bytes (206 with `Range`: one range; 416 past its end)",
    "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
}


@router.get("/{job_id}/files", response_model=FileListing, responses=errors(401, 404, 409, 422))
def list_job_files(job_id: JobId, user: User, ctx: Ctx, path: FilePath = "", task: Task = None,
                   attempt: Attempt = None) -> FileListing:
    """A folder of the job's directory, or of a task's working directory: its entries by name
    (symbolic links shown with their text, never followed), at most 1000."""
    place = job_files.find_place(ctx.db, ctx.specs, ctx.backend, user, job_id, task, attempt)
    return job_files.list_files(place, path)


@router.get("/{job_id}/files/download", response_model=None,
            responses={200: DOWNLOAD_RESPONSE, 206: DOWNLOAD_RESPONSE, **errors(401, 404, 409, 416, 422)})
async def download_job_file(job_id: JobId, user: User, ctx: Ctx, path: FilePath, task: Task = None,
                            attempt: Attempt = None,
                            range_header: Annotated[str | None, Header(alias="Range")] = None) -> Response:
    """A regular file of the job's directory or a task's working directory, streamed; one
    byte range with ``Range``. Symbolic links, FIFOs, devices and hard-linked files are refused (422)."""
    place = await run_in_threadpool(job_files.find_place, ctx.db, ctx.specs, ctx.backend, user, job_id, task,
                                    attempt)
    opened = await run_in_threadpool(job_files.open_file, place, path)
    return file_response(opened, range_header, path.rstrip("/").rsplit("/", 1)[-1])
