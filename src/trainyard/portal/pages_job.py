"""One job's page: its summary, pending reason, attempts and tasks, events and job file
(secrets masked), refreshed while the job is live; Stop; and the cookie-authenticated routes
its script reads: the monitoring history (``GET /api/v1/jobs/{id}/metrics``'s answer), a
task's log a page at a time by byte offset, and the whole log streamed.

Every route reads through the same services, with the same permission checks, as the API:
another user's job is not found."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response, StreamingResponse

from trainyard.backends.base import TaskExec
from trainyard.core.sessions import session_path
from trainyard.core.states import JobState, TaskState
from trainyard.portal.auth import Action, Page, Viewer
from trainyard.portal.templating import SECURITY_HEADERS, TERMINAL_PAGE_HEADERS, render
from trainyard.schemas.jobs import (
    LOG_ATTEMPT_HEADER,
    LOG_MAX_PAGE_BYTES,
    LOG_OFFSET_HEADER,
    LOG_SIZE_HEADER,
    LOG_TASK_HEADER,
    AttemptView,
    JobDetail,
    TaskView,
)
from trainyard.services import all_logs, job_actions
from trainyard.services import logs as log_service
from trainyard.services import sweeps as sweep_service
from trainyard.services.errors import NotFound
from trainyard.spec.storages import storage_uses
from trainyard.web.bodies import MAX_ID
from trainyard.web.context import AppContext, context

router = APIRouter()

Ctx = Annotated[AppContext, Depends(context)]
JobId = Annotated[int, Path(ge=1, le=MAX_ID)]
Attempt = Annotated[int | None, Query(ge=0, le=MAX_ID)]
# Whether a log read reached the end of a task that has ended: nothing more will come.
LOG_ENDED_HEADER = "X-Log-Ended"
# Where each task's log goes on from in an all-tasks read: ROLE/INDEX:OFFSET,… to pass back.
LOG_CURSOR_HEADER = "X-Log-Cursor"
LOG_CURSOR_CHARS = 64_000
LIVE_REFRESH_SECONDS = 2  # how often the page's state is fetched again while the job is live
CHART_WINDOW = timedelta(days=365)  # the longest the history route takes is a little more


def _detail(ctx: AppContext, viewer: Viewer, job_id: int) -> JobDetail:
    return job_actions.job_detail(ctx, viewer.user, job_id)


def _shown_attempt(detail: JobDetail, attempt: int | None) -> AttemptView | None:
    """The attempt asked for, else the job's current one, else (a job waiting to resume or to
    run again, whose next attempt has no tasks yet) the latest that ran; None before any ran."""
    number = detail.attempt if attempt is None else attempt
    found = [a for a in detail.attempts if a.number == number]
    if not found and attempt is not None:
        raise NotFound(f"job {detail.id} has no attempt {attempt}")
    if not found and detail.attempts:
        return max(detail.attempts, key=lambda a: a.number)
    return found[0] if found else None


def _tasks_by_role(attempt: AttemptView | None) -> dict[str, list[TaskView]]:
    roles: dict[str, list[TaskView]] = {}
    for task in sorted(attempt.tasks if attempt else [], key=lambda t: (t.role, t.index)):
        roles.setdefault(task.role, []).append(task)
    return roles


def _state_values(ctx: AppContext, viewer: Viewer, job_id: int, attempt: int | None) -> dict[str, Any]:
    detail = _detail(ctx, viewer, job_id)
    shown = _shown_attempt(detail, attempt)
    now = ctx.clock.now()
    is_session = job_actions.is_session(ctx, job_id)  # a session's job: the page opens it (its owner's alone)
    lab = is_session and detail.user == viewer.user.name
    return {
        "job": detail, "shown": shown, "chosen_attempt": attempt, "roles": _tasks_by_role(shown), "now": now,
        "live": not detail.state.is_final, "refresh_seconds": LIVE_REFRESH_SECONDS,
        "lab_url": session_path(job_id) + "lab" if lab else None, "is_session": is_session,
        "sweep_of": sweep_service.sweeps_of_jobs(ctx, [job_id]).get(job_id),  # after the access check
    }


@dataclass(frozen=True)
class RoleSetting:
    """What one task role runs in and mounts, as its job file says (the role's own, else the job's)."""

    role: str
    environment: str | None
    image: str | None
    storages: list[str]  # "NAME → MOUNT (read-only)" each


def _runs_in(ctx: AppContext, viewer: Viewer, job_id: int) -> list[RoleSetting]:
    """Each role's environment, image and storages; empty when no role names any."""
    spec = ctx.specs.known(job_id)
    if spec is None:  # parsed by _detail a moment ago, unless the cache let it go since
        spec = job_actions.job_spec(ctx, viewer.user, job_id)
    settings = []
    for role in spec.role_names:
        mounts = [f"{use.name}{'/' + use.sub_path if use.sub_path else ''} → {use.mount_path or 'its own path'}"
                  f"{' (read-only)' if use.read_only else ''}" for use in storage_uses(spec, role)]
        settings.append(RoleSetting(role, spec.environment_of(role), spec.role_image(role), mounts))
    return settings if any(s.environment or s.image or s.storages for s in settings) else []


def _chart_window(detail: JobDetail, now: datetime) -> tuple[str, str]:
    """From the job's first start (or its submission, for one that has not started: the
    charts fill in once it runs) until it ended or now, as the history route takes it."""
    until = detail.finishedAt or now
    since = max((detail.startedAt or detail.submittedAt) - timedelta(seconds=30), until - CHART_WINDOW)
    return since.isoformat(), until.isoformat()


def _charts_empty(detail: JobDetail) -> str:
    """What the charts say when they have no figure: true of a live job, and of an ended one."""
    if not detail.state.is_final:
        return "no figures sampled yet"
    if detail.startedAt is None:
        return "no figures: it ended before any task ran"
    return ("no figures for its run: it ended before its tasks were sampled, "
            "or its samples are older than the monitor keeps them (monitor_retention)")


@router.get("/jobs/{job_id}")
def job_page(request: Request, job_id: JobId, viewer: Page, ctx: Ctx, attempt: Attempt = None) -> Response:
    values = _state_values(ctx, viewer, job_id, attempt)
    detail: JobDetail = values["job"]
    shown: AttemptView | None = values["shown"]
    terminal_tasks = _terminal_tasks(ctx, viewer, detail, values["roles"])
    return render(request, "job.html", user=viewer.user, web_session=viewer.web_session, **values,
                  tasks=detail.task_labels(), runs_in=_runs_in(ctx, viewer, job_id),
                  chart_window=_chart_window(detail, values["now"]), charts_empty=_charts_empty(detail),
                  log_attempt=None if attempt is None or shown is None else shown.number,
                  terminal_tasks=terminal_tasks, headers=TERMINAL_PAGE_HEADERS if terminal_tasks else None)


def _terminal_tasks(ctx: AppContext, viewer: Viewer, detail: JobDetail, roles: dict[str, list[TaskView]]) -> list[str]:
    """The running tasks the page offers a terminal in (ROLE/INDEX): only its owner's page,
    while the job runs, where the backend can (``TaskExec``; the exec WebSocket checks again).
    An admin's browser gets none: the terminal would run with the admin's session."""
    if detail.state != JobState.RUNNING or detail.user != viewer.user.name or not isinstance(ctx.backend, TaskExec):
        return []
    return [f"{role}/{t.index}" for role, tasks in roles.items() for t in tasks if t.state == TaskState.RUNNING]


@router.get("/jobs/{job_id}/state")
def job_state_fragment(request: Request, job_id: JobId, viewer: Page, ctx: Ctx, attempt: Attempt = None) -> Response:
    """The part of the page that changes while the job is live (htmx polls it); once the job
    has ended, the fragment it answers polls no more."""
    return render(request, "_job_state.html", user=viewer.user, web_session=viewer.web_session,
                  **_state_values(ctx, viewer, job_id, attempt))


@router.post("/jobs/{job_id}/stop")
def stop_job(job_id: JobId, viewer: Action, ctx: Ctx) -> Response:
    job_actions.stop(ctx, viewer.user, job_id)
    return RedirectResponse(f"/jobs/{job_id}", status_code=303, headers=SECURITY_HEADERS)


@router.post("/jobs/{job_id}/suspend")
def suspend_job(job_id: JobId, viewer: Action, ctx: Ctx) -> Response:
    job_actions.suspend(ctx, viewer.user, job_id)
    return RedirectResponse(f"/jobs/{job_id}", status_code=303, headers=SECURITY_HEADERS)


@router.post("/jobs/{job_id}/resume")
def resume_job(job_id: JobId, viewer: Action, ctx: Ctx) -> Response:
    job_actions.resume(ctx, viewer.user, job_id)
    return RedirectResponse(f"/jobs/{job_id}", status_code=303, headers=SECURITY_HEADERS)


@router.get("/jobs/{job_id}/metrics.json")
def job_metrics(
    job_id: JobId,
    viewer: Page,
    ctx: Ctx,
    since: Annotated[str | None, Query(max_length=64)] = None,
    until: Annotated[str | None, Query(max_length=64)] = None,
    task: Annotated[str | None, Query(max_length=80)] = None,
) -> Response:
    """``GET /api/v1/jobs/{id}/metrics``'s answer, for the page's charts."""
    metrics = job_actions.job_metrics(ctx, viewer.user, job_id, since=since, until=until, task=task)
    return Response(metrics.model_dump_json(), media_type="application/json", headers=SECURITY_HEADERS)


LogTask = Annotated[str | None, Query(max_length=80)]


@router.get("/jobs/{job_id}/log")
async def job_log(
    job_id: JobId,
    viewer: Page,
    ctx: Ctx,
    task: LogTask = None,
    attempt: Attempt = None,
    offset: Annotated[int | None, Query(ge=0, le=2**62)] = None,
    tail: Annotated[int | None, Query(ge=0, le=100000)] = None,
    limit: Annotated[int, Query(ge=0, le=LOG_MAX_PAGE_BYTES)] = 256 << 10,
) -> Response:
    """A page of a task's log, as ``GET /api/v1/jobs/{id}/logs`` answers it, and whether the
    task has ended with this page the end of its log (``X-Log-Ended``): the page's script
    reads on from ``X-Log-Offset`` plus what it got until then."""
    logs = log_service.TaskLogs(ctx.db, ctx.specs, ctx.backend, ctx.closing)
    target = await run_in_threadpool(logs.find, viewer.user, job_id, task, attempt)
    headers = {**SECURITY_HEADERS, LOG_TASK_HEADER: target.label}
    if target.key is None:
        return Response(b"", media_type="text/plain; charset=utf-8",
                        headers={**headers, LOG_OFFSET_HEADER: "0", LOG_SIZE_HEADER: "0",
                                 LOG_ENDED_HEADER: _flag(target.ended)})
    chunk = await run_in_threadpool(logs.read, target.key, offset=offset, tail=tail, limit=limit)
    at_end = chunk.offset + len(chunk.data) >= chunk.size
    return Response(chunk.data, media_type="text/plain; charset=utf-8", headers={
        **headers, LOG_OFFSET_HEADER: str(chunk.offset), LOG_SIZE_HEADER: str(chunk.size),
        LOG_ATTEMPT_HEADER: str(target.key.attempt), LOG_ENDED_HEADER: _flag(target.ended and at_end),
    })


@router.get("/jobs/{job_id}/log/whole")
async def whole_log(job_id: JobId, viewer: Page, ctx: Ctx, task: LogTask = None, attempt: Attempt = None) -> Response:
    """A task's whole log as it is now, streamed a page at a time (a log of any size)."""
    logs = log_service.TaskLogs(ctx.db, ctx.specs, ctx.backend, ctx.closing)
    target = await run_in_threadpool(logs.find, viewer.user, job_id, task, attempt)
    name = f"job-{job_id}-{target.role}-{target.index}.log"
    headers = {**SECURITY_HEADERS, LOG_TASK_HEADER: target.label,
               "Content-Disposition": f'inline; filename="{_ascii_name(name)}"'}
    if target.key is None:
        return Response(b"", media_type="text/plain; charset=utf-8", headers=headers)
    headers[LOG_ATTEMPT_HEADER] = str(target.key.attempt)
    return StreamingResponse(logs.whole(target.key), media_type="text/plain; charset=utf-8", headers=headers)


@router.get("/jobs/{job_id}/log/all")
async def all_tasks_log(
    job_id: JobId,
    viewer: Page,
    ctx: Ctx,
    attempt: Attempt = None,
    cursor: Annotated[str | None, Query(max_length=LOG_CURSOR_CHARS)] = None,
    tail: Annotated[int | None, Query(ge=0, le=100000)] = None,
    limit: Annotated[int, Query(ge=0, le=LOG_MAX_PAGE_BYTES)] = 256 << 10,
) -> Response:
    """New whole lines of every task's log, each prefixed ``[ROLE/INDEX] ``, from ``cursor``
    (each task's offset, ``X-Log-Cursor`` of the last answer; without it, from each task's last
    ``tail`` lines), and whether every task has ended with its log read (``X-Log-Ended``)."""
    logs = log_service.TaskLogs(ctx.db, ctx.specs, ctx.backend, ctx.closing)
    offsets = all_logs.parse_cursor(cursor) if cursor is not None else None
    targets = await run_in_threadpool(all_logs.find_all, logs, viewer.user, job_id, attempt)
    page = await run_in_threadpool(partial(all_logs.merged_page, logs, targets, offsets, tail=tail, limit=limit))
    headers = {**SECURITY_HEADERS, LOG_CURSOR_HEADER: all_logs.format_cursor(page.offsets),
               LOG_ENDED_HEADER: _flag(page.ended)}
    if page.attempt is not None:
        headers[LOG_ATTEMPT_HEADER] = str(page.attempt)
    return Response(page.data, media_type="text/plain; charset=utf-8", headers=headers)


@router.get("/jobs/{job_id}/log/all/whole")
async def all_tasks_whole_log(job_id: JobId, viewer: Page, ctx: Ctx, attempt: Attempt = None) -> Response:
    """Every task's whole log as it is now, task after task, each line prefixed."""
    logs = log_service.TaskLogs(ctx.db, ctx.specs, ctx.backend, ctx.closing)
    targets = await run_in_threadpool(all_logs.find_all, logs, viewer.user, job_id, attempt)
    headers = {**SECURITY_HEADERS, "Content-Disposition": f'inline; filename="job-{job_id}-all-tasks.log"'}
    return StreamingResponse(all_logs.whole_all(logs, targets), media_type="text/plain; charset=utf-8",
                             headers=headers)


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _ascii_name(name: str) -> str:
    """A file name safe inside a header's quotes, whatever a role is called."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in name)
