"""A job's files in the portal: a folder of the job's directory or of a task's working
directory listed, a file's first bytes shown as text, and its download (ranges), with the
API's services and access rules (another user's job is not found; an admin may look).

Every name and byte comes from the job: the template escapes them (Jinja's autoescape), a
preview is shown only as text inside ``<pre>``, and a download is an attachment that never
renders as a page of this origin (``web/downloads``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Header, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from trainyard.portal.auth import Page
from trainyard.portal.templating import render
from trainyard.services import job_actions, job_files
from trainyard.web.bodies import MAX_ID
from trainyard.web.context import AppContext, context
from trainyard.web.downloads import file_response

router = APIRouter()

Ctx = Annotated[AppContext, Depends(context)]
JobId = Annotated[int, Path(ge=1, le=MAX_ID)]
FilePath = Annotated[str, Query(max_length=4096)]
Task = Annotated[str | None, Query(max_length=80)]
Attempt = Annotated[int | None, Query(ge=0, le=MAX_ID)]


def _labels(ctx: AppContext, viewer: Page, job_id: int) -> tuple[str, list[str]]:
    """The job's name and every task of its job file or its attempts, ROLE/INDEX (the
    permission check too)."""
    detail = job_actions.job_detail(ctx, viewer.user, job_id)
    return detail.name, detail.task_labels()


@router.get("/jobs/{job_id}/files")
def files_page(request: Request, job_id: JobId, viewer: Page, ctx: Ctx, path: FilePath = "", task: Task = None,
               attempt: Attempt = None) -> Response:
    """A folder's listing, with links into its folders and to each file's view."""
    name, tasks = _labels(ctx, viewer, job_id)
    place = job_files.find_place(ctx.db, ctx.specs, ctx.backend, viewer.user, job_id, task, attempt)
    listing = job_files.list_files(place, path)
    return render(request, "job_files.html", user=viewer.user, web_session=viewer.web_session, job_id=job_id,
                  job_name=name, tasks=tasks, place=place, listing=listing, crumbs=_crumbs(listing.path),
                  preview=None)


@router.get("/jobs/{job_id}/files/view")
def file_view(request: Request, job_id: JobId, viewer: Page, ctx: Ctx, path: FilePath, task: Task = None,
              attempt: Attempt = None) -> Response:
    """A file's size, its download link and its first bytes as text (escaped), if it is text."""
    name, tasks = _labels(ctx, viewer, job_id)
    place = job_files.find_place(ctx.db, ctx.specs, ctx.backend, viewer.user, job_id, task, attempt)
    data, size = job_files.preview(place, path)
    text = None if b"\0" in data else data.decode("utf-8", errors="replace")
    names = [p for p in path.split("/") if p]
    return render(request, "job_files.html", user=viewer.user, web_session=viewer.web_session, job_id=job_id,
                  job_name=name, tasks=tasks, place=place, listing=None, crumbs=_crumbs("/".join(names)),
                  preview={"path": "/".join(names), "size": size, "text": text, "cut": size > len(data)})


@router.get("/jobs/{job_id}/files/download")
async def file_download(job_id: JobId, viewer: Page, ctx: Ctx, path: FilePath, task: Task = None,
                        attempt: Attempt = None,
                        range_header: Annotated[str | None, Header(alias="Range")] = None) -> Response:
    place = await run_in_threadpool(job_files.find_place, ctx.db, ctx.specs, ctx.backend, viewer.user, job_id,
                                    task, attempt)
    opened = await run_in_threadpool(job_files.open_file, place, path)
    return file_response(opened, range_header, path.rstrip("/").rsplit("/", 1)[-1])


def _crumbs(path: str) -> list[tuple[str, str]]:
    """(name, the folder's path) for each folder on the way to ``path``."""
    names = [p for p in path.split("/") if p]
    return [(name, "/".join(names[: i + 1])) for i, name in enumerate(names)]
