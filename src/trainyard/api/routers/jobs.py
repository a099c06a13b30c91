"""HTTP routes for jobs: submit, clone, list, show, stop, logs. Parsing and permissions only."""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Depends, Header, HTTPException, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from trainyard.api.deps import current_user
from trainyard.api.openapi import CLONE_BODY, JOB_FILE_BODY, errors
from trainyard.schemas.jobs import (
    LOG_ATTEMPT_HEADER,
    LOG_MAX_PAGE_BYTES,
    LOG_OFFSET_HEADER,
    LOG_PAGE_BYTES,
    LOG_RUN_HEADER,
    LOG_SIZE_HEADER,
    LOG_TASK_HEADER,
    DryRunResult,
    JobDetail,
    JobPage,
    SubmitResult,
)
from trainyard.schemas.requests import NO_NUL
from trainyard.services import all_logs, idempotency, job_actions, submission
from trainyard.services import jobs as job_service
from trainyard.services import logs as log_service
from trainyard.services.errors import Invalid
from trainyard.spec.loading import load_document, validate_job
from trainyard.spec.sweeps import not_a_job_file
from trainyard.spec.templating import masked_spec
from trainyard.store.rows import UserRow
from trainyard.web.bodies import MAX_ID, MAX_JOB_FILE_BYTES, BodyRoute
from trainyard.web.callers import credential_key
from trainyard.web.context import AppContext, context
from trainyard.web.revocation import watched

router = APIRouter(prefix="/jobs", tags=["jobs"], route_class=BodyRoute)


User = Annotated[UserRow, Depends(current_user)]
JobId = Annotated[int, Path(ge=1, le=MAX_ID, description="The job's id")]
Ctx = Annotated[AppContext, Depends(context)]

IDEMPOTENCY_HELP = (
    "Optional: one key (e.g. a UUID) per job you mean to submit; send it again with the same request to "
    "retry a submit whose answer you did not get. A retry within the kept time (`idempotency_key_hours`, 24 h "
    "by default) gets the first answer again, status and body (the same job, marked `Idempotent-Replayed: "
    "true`), and makes nothing; the key with another request is 422. A dry run ignores it."
)
# The upload a job runs in (PUT /workdirs), in place of the job file's own `workdir`.
WorkdirDigest = Annotated[str | None, Query(
    pattern=r"^sha256:[0-9a-f]{64}$",
    description="The working directory its tasks start in: an upload of yours (PUT /workdirs), in place of the "
                "job file's `workdir` (which names the folder on the sender's machine)")]
# Checked by idempotency.parse_key, which answers at the header's name as the field path.
IdempotencyKey = Annotated[str | None, Header(alias=idempotency.HEADER, description=IDEMPOTENCY_HELP)]


@router.post("", status_code=201, openapi_extra=JOB_FILE_BODY, response_model=None,
             responses={201: {"model": SubmitResult}, 200: {"model": DryRunResult, "description": "Dry run"},
                        **errors(401, 403, 404, 413, 422)})
async def submit_job(
    request: Request,
    user: User,
    ctx: Ctx,
    dry_run: Annotated[bool, Query(alias="dryRun")] = False,
    idempotency_key: IdempotencyKey = None,
    workdir: WorkdirDigest = None,
) -> Response:
    """Submit a job; with ``dryRun=true`` only validate it and return the normalised job. With an
    ``Idempotency-Key``, a retry of the same submit answers the first job instead of making another."""
    key = idempotency.parse_key(idempotency_key)
    body = await _read_limited(request)
    media_type = _media_type(request)
    keyed = submission.Keyed(key, idempotency.fingerprint("POST", "/jobs", media_type,
                                                          {} if workdir is None else {"workdir": workdir}, body))
    if not dry_run and (replay := await run_in_threadpool(submission.earlier_answer, ctx, user, keyed)) is not None:
        return _answered(replay)
    document = load_document(body, content_type="json" if media_type.endswith("json") else "yaml")
    not_a_job_file(document)  # a sweep is several jobs: POST /sweeps
    spec = validate_job(document)
    if workdir is not None:
        spec = spec.model_copy(update={"workdir": workdir})
    if dry_run:
        warnings = await run_in_threadpool(submission.dry_run, ctx, user, spec)
        images = {role: image for role in spec.role_names if (image := spec.role_image(role)) is not None}
        dry = DryRunResult(job=masked_spec(spec), warnings=warnings, images=images)
        return Response(dry.model_dump_json(), media_type="application/json")
    if (answer := submission.queued(ctx, user, spec, keyed)) is not None:  # made with others: awaited
        return _answered(await asyncio.wrap_future(answer))
    return _answered(await run_in_threadpool(submission.submit, ctx, user, spec, keyed))


def _answered(answer: idempotency.Answer) -> Response:
    headers = {idempotency.REPLAYED_HEADER: "true"} if answer.replayed else None
    return Response(answer.body, status_code=answer.status, media_type="application/json", headers=headers)


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


@router.post("/{job_id}/clone", status_code=201, openapi_extra=CLONE_BODY, response_model=None,
             responses={201: {"model": SubmitResult}, **errors(401, 403, 404, 413, 422)})
async def clone_job(
    job_id: JobId,
    request: Request,
    user: User,
    ctx: Ctx,
    name: Annotated[str | None, Query(max_length=255, description="The clone's name")] = None,
    vc: Annotated[str | None, Query(max_length=255, description="The clone's virtual cluster")] = None,
    priority: Annotated[str | None, Query(max_length=16, description="The clone's priority")] = None,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Submit a copy of one of your jobs (an admin: of anyone's), its secrets kept: they never
    leave the server. The body, if any, is a whole job file to run instead, as the job is shown:
    its values still masked (``******``) are filled from the original. ``Idempotency-Key`` as
    for a submit."""
    key = idempotency.parse_key(idempotency_key)
    body = await _read_limited(request)
    media_type = _media_type(request)
    keyed = submission.Keyed(key, idempotency.fingerprint("POST", f"/jobs/{job_id}/clone", media_type,
                                                          {"name": name, "vc": vc, "priority": priority}, body))
    if (replay := await run_in_threadpool(submission.earlier_answer, ctx, user, keyed)) is not None:
        return _answered(replay)
    document = None
    if body.strip():
        document = load_document(body, content_type="json" if media_type.endswith("json") else "yaml")
    changes = job_service.CloneChanges(document=document, name=name, vc=vc, priority=priority)
    return _answered(await run_in_threadpool(submission.clone, ctx, user, job_id, changes, keyed))


async def _read_limited(request: Request) -> bytes:
    """The request body, refusing (413) anything larger than a job file should be."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_JOB_FILE_BYTES:
        raise _too_large()
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_JOB_FILE_BYTES:
            raise _too_large()
    return bytes(body)


def _too_large() -> HTTPException:
    return HTTPException(413, f"the job file is larger than {MAX_JOB_FILE_BYTES // 1024} KiB; "
                              "keep data out of it and pass paths or parameters instead")


@router.get("", response_model=JobPage, responses=errors(401, 422))
def list_jobs(
    user: User,
    ctx: Ctx,
    state: Annotated[str | None, Query(description="Comma-separated states, e.g. WAITING,RUNNING")] = None,
    owner: Annotated[str | None, Query(alias="user", description="Only this user's jobs")] = None,
    vc: Annotated[str | None, Query(description="Only jobs of this virtual cluster")] = None,
    name: Annotated[str | None, Query(max_length=128, description="Only jobs whose name contains this text "
                                                                  "(any case)")] = None,
    order: Annotated[str, Query(max_length=16, description="newest (the default) or oldest first; or by a "
                                "column, then newest first: name, user, vc, state (-name … the other way)")] = "newest",
    limit: Annotated[int, Query(ge=1, le=job_service.MAX_PAGE)] = 50,
    before: Annotated[int | None, Query(ge=1, le=MAX_ID, description="Cursor (every order but oldest first): "
                                                                     "the `next` of the previous page")] = None,
    after: Annotated[int | None, Query(ge=0, le=MAX_ID, description="Cursor (oldest first): the `next` of the "
                                                                    "previous page")] = None,
) -> JobPage:
    return job_actions.job_page(ctx, user, state=state, user=owner, vc=vc, text=name, order=order, limit=limit,
                                before=before, after=after)


@router.get("/{job_id}", response_model=JobDetail, responses=errors(401, 404, 422))
def get_job(job_id: JobId, user: User, ctx: Ctx) -> JobDetail:
    detail = job_actions.job_detail(ctx, user, job_id)
    # Outside the session: measuring the job's directory walks the file system.
    detail.jobDir = ctx.job_dirs.view(detail.id, detail.state, detail.finishedAt)
    return detail


StopReason = Annotated[str, Query(max_length=1000, pattern=NO_NUL,
                                   description="Why, for the job's owner: its message and history say it")]


@router.post("/{job_id}/stop", response_model=JobDetail, responses=errors(401, 404, 409, 422))
def stop_job(job_id: JobId, user: User, ctx: Ctx, reason: StopReason = "") -> JobDetail:
    job_actions.stop(ctx, user, job_id, because=reason.strip())
    return get_job(job_id, user, ctx)


@router.post("/{job_id}/suspend", response_model=JobDetail, responses=errors(401, 404, 409, 422))
def suspend_job(job_id: JobId, user: User, ctx: Ctx) -> JobDetail:
    """Suspend a job and hold it until it is resumed. A running job must have declared
    `preemption: suspend`: its tasks are told to save their state (the suspend signal and
    request file) and stopped after its suspend grace period; a waiting job is held."""
    job_actions.suspend(ctx, user, job_id)
    return get_job(job_id, user, ctx)


@router.post("/{job_id}/resume", response_model=JobDetail, responses=errors(401, 403, 404, 409, 422))
def resume_job(job_id: JobId, user: User, ctx: Ctx) -> JobDetail:
    """Let a job held by `suspend` resume: it waits for room as a new attempt, with its place
    in the queue. A job an admin suspended only an admin may resume."""
    job_actions.resume(ctx, user, job_id)
    return get_job(job_id, user, ctx)


LOG_RESPONSE = {
    "description": "A page of the log's bytes (see `limit`); with follow=true, the log streamed until the task "
                   "ends or the server shuts down (and then without the headers)",
    "content": {"text/plain": {"schema": {"type": "string"}}},
    "headers": {
        LOG_OFFSET_HEADER: {"description": "Byte offset of the first byte sent", "schema": {"type": "integer"}},
        LOG_SIZE_HEADER: {"description": "The log's size when read: while offset + bytes sent is below it, "
                                         "ask for the next page from there", "schema": {"type": "integer"}},
        LOG_TASK_HEADER: {"description": "The task shown, ROLE/INDEX (absent before the task ran)",
                          "schema": {"type": "string"}},
        LOG_ATTEMPT_HEADER: {"description": "The attempt shown (absent before the task ran): pass it as "
                                            "`attempt` for the next pages", "schema": {"type": "integer"}},
        LOG_RUN_HEADER: {"description": "The task's run shown in that attempt (0 first): pass it as `run` for "
                                        "the next pages of an earlier run", "schema": {"type": "integer"}},
    },
}
ALL_HELP = ("Every task's log in one stream, each line prefixed `[ROLE/INDEX] ` (whole lines only): task "
            "after task as the logs are now, or with follow=true as lines are written until every task ends; "
            "`tail` then counts per task, and `task`, `offset` and `limit` do not apply")
RUN_HELP = ("Which run of the task in the attempt (0 first): a task re-run in place after a failure "
            "(taskRetryCount) or restarted by an elastic resize has one log per run; default: the latest")
PAGE_LIMIT_HELP = (f"Most bytes in this page (default {LOG_PAGE_BYTES}); a page ends at a line's end "
                   "unless it reaches the end of the log")


@router.get("/{job_id}/logs", response_model=None, responses={200: LOG_RESPONSE, **errors(401, 404, 422)})
async def job_logs(
    request: Request,
    job_id: JobId,
    user: User,
    ctx: Ctx,
    task: Annotated[str | None, Query(description="ROLE/INDEX, e.g. worker/1; default: the first task")] = None,
    attempt: Annotated[int | None, Query(ge=0, le=MAX_ID, description="Default: the latest attempt")] = None,
    offset: Annotated[int | None, Query(ge=0, le=2**62, description="Byte offset to read from")] = None,
    tail: Annotated[int | None, Query(ge=0, le=100000, description="Only the last N lines")] = None,
    limit: Annotated[int, Query(ge=0, le=LOG_MAX_PAGE_BYTES, description=PAGE_LIMIT_HELP)] = (
        LOG_PAGE_BYTES),
    follow: bool = False,
    all_tasks: Annotated[bool, Query(alias="all", description=ALL_HELP)] = False,
    run: Annotated[int | None, Query(ge=0, le=MAX_ID, description=RUN_HELP)] = None,
    previous: Annotated[bool, Query(description="The task's run before its latest in the attempt "
                                                "(`kubectl logs --previous`)")] = False,
) -> Response:
    """A page of a task's combined stdout and stderr; ``follow=true`` streams until the task ends.
    With ``all=true``, every task's log, each line prefixed ``[ROLE/INDEX] ``; with ``run`` or
    ``previous``, an earlier run's (a task re-run in place after a failure, or restarted by a resize)."""
    logs = log_service.TaskLogs(ctx.db, ctx.specs, ctx.backend, ctx.closing)
    asked_run = log_service.PREVIOUS if previous else run
    field = "previous" if previous else "run"
    why = ("`run` or `previous`, not both" if previous and run is not None
           else None if asked_run is None
           else "an earlier run has ended: read it without follow" if follow
           else "one task's runs: not with all" if all_tasks else None)
    if why is not None:
        raise Invalid(why, details=[{"path": field, "message": why}])
    if all_tasks:
        return await _all_logs(request, job_id, user, ctx, logs, attempt=attempt, tail=tail, follow=follow,
                               task=task, offset=offset)
    target = await run_in_threadpool(logs.find, user, job_id, task, attempt, asked_run)
    # A followed log ends when the token that asked for it is revoked (web/revocation.py).
    credential = credential_key(request.headers, {})
    if target.key is None:
        if follow:
            return StreamingResponse(watched(ctx.connections, credential, logs.follow(target, 0)),
                                     media_type="text/plain")
        return Response(b"", media_type="text/plain", headers={LOG_OFFSET_HEADER: "0", LOG_SIZE_HEADER: "0"})
    chunk = await run_in_threadpool(logs.read, target.key, offset=offset, tail=tail, limit=limit)
    if follow:
        return StreamingResponse(watched(ctx.connections, credential, logs.follow(target, chunk.offset,
                                                                                 first=chunk.data)),
                                 media_type="text/plain")
    return Response(
        chunk.data,
        media_type="text/plain",
        headers={LOG_OFFSET_HEADER: str(chunk.offset), LOG_SIZE_HEADER: str(chunk.size), LOG_TASK_HEADER: target.label,
                 LOG_ATTEMPT_HEADER: str(target.key.attempt), LOG_RUN_HEADER: str(target.key.run)},
    )


async def _all_logs(request: Request, job_id: int, user: UserRow, ctx: AppContext, logs: log_service.TaskLogs, *,
                    attempt: int | None, tail: int | None, follow: bool, task: str | None,
                    offset: int | None) -> Response:
    """``GET /jobs/{id}/logs?all=true``: every task's log, prefixed (services/all_logs.py)."""
    if task is not None or offset is not None:
        field = "task" if task is not None else "offset"
        raise Invalid(f"`{field}` reads one task's log; with all=true every task's log is sent (leave out `{field}`)",
                      details=[{"path": field, "message": "not with all=true"}])
    targets = await run_in_threadpool(all_logs.find_all, logs, user, job_id, attempt)
    if follow:
        credential = credential_key(request.headers, {})
        return StreamingResponse(watched(ctx.connections, credential, all_logs.follow_all(logs, user, job_id, attempt,
                                                                                         tail)),
                                 media_type="text/plain")
    headers = {} if not targets or targets[0].key is None else {LOG_ATTEMPT_HEADER: str(targets[0].key.attempt)}
    return StreamingResponse(all_logs.whole_all(logs, targets, tail), media_type="text/plain",
                             headers=headers)
