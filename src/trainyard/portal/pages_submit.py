"""The Submit page: a form for single and distributed jobs beside a YAML editor, kept in
sync both ways on the server; Check (the API's dry run), Submit, import and export; and
Clone (``/submit?clone=ID``), which opens the page on a copy of a job.

One parser: both directions go through ``trainyard.spec`` loading (``submit_form`` only
moves values between the form and the document), and Check and Submit call the same
use cases as ``POST /api/v1/jobs`` (``?dryRun=true``) and ``POST /api/v1/jobs/{id}/clone``
(``services/submission.py``), which wake the controller.

A clone's page shows the original's secrets masked, as the API shows them; the form carries
``clone_of``, and the clone service fills every value still masked from the original on the
server, so the real secrets run without ever reaching the browser.

Every request here is a POST of the whole form (htmx sends it on each edit): the YAML
editor's text, the form's fields, and ``edited`` (which of the two the user changed last,
set by ``submit.js``), so that Check, Submit and Export use whichever is newer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response
from starlette.datastructures import FormData

from trainyard.portal.auth import Action, Page, Viewer
from trainyard.portal.submit_form import (
    MAX_ROLES,
    NEW_ROLE_COMMAND,
    PLACEHOLDERS,
    STARTER,
    JobFields,
    RoleFields,
    apply_fields,
    dump_yaml,
    fields_from_document,
    fields_from_form,
    form_field_of,
)
from trainyard.portal.templating import SECURITY_HEADERS, render
from trainyard.services import cluster_actions, job_actions, submission, workdirs
from trainyard.services import jobs as job_service
from trainyard.services.errors import Invalid, ServiceError
from trainyard.spec.errors import SpecError
from trainyard.spec.loading import load_document, validate_job
from trainyard.spec.models import Priority
from trainyard.spec.templating import masked_spec
from trainyard.web.bodies import MAX_ID, MAX_JOB_FILE_BYTES
from trainyard.web.context import AppContext, context

router = APIRouter()

Ctx = Annotated[AppContext, Depends(context)]
EDITED_YAML = "yaml"
EDITED_FORM = "form"
_OPERATION = re.compile(r"(add-role|remove-role-(\d+)|add-env-(\d+)|remove-env-(\d+)-(\d+))")


@dataclass
class Editor:
    """What the page shows: the YAML editor's text, the form, and the outcome of a check."""

    yaml: str
    fields: JobFields
    clone_of: int | None = None
    document: Any = None  # the job as data; None while the YAML editor's text does not parse
    errors: dict[str, list[str]] = field(default_factory=dict)  # by form field
    problems: list[str] = field(default_factory=list)  # errors with no form field: above the YAML
    warnings: list[str] = field(default_factory=list)
    notice: str = ""
    status: int = 200  # a refused check's: 422, or the service's (403 for a VC not the user's)

    def refuse(self, path: str, message: str) -> None:
        target = form_field_of(path, self.fields)
        if target is None:
            self.problems.append(f"{path}: {message}" if path else message)
        else:
            self.errors.setdefault(target, []).append(message)


# --- reading the posted form --------------------------------------------------------------


async def _posted(request: Request, upload_limit: int = 0) -> FormData:
    """The posted form (its length already bounded by the CSRF check, ``auth.bounded_form``);
    up to ``upload_limit`` bytes more when it carries a file (the working directory's
    archive), else no more than a job file."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > 2 * MAX_JOB_FILE_BYTES + upload_limit:
        if upload_limit:
            raise Invalid(f"the working directory's archive is larger than {upload_limit >> 20} MiB, more than "
                          "this cluster takes; leave big files out, or put data in a storage")
        raise Invalid(f"the job is larger than {MAX_JOB_FILE_BYTES // 1024} KiB; keep data out of it")
    return await request.form()


def _clone_of(form: FormData) -> int | None:
    value = form.get("clone_of")
    if not isinstance(value, str) or not value.strip():
        return None
    if not value.strip().isdigit() or not 1 <= int(value) <= MAX_ID:
        raise Invalid(f"clone_of must be a job id (got {value[:40]!r})", details=[{"path": "clone_of",
                                                                                    "message": "not a job id"}])
    return int(value)


def _base(text: str) -> Any:
    """The YAML editor's text as data ({} when empty); raises SpecError as loading does."""
    return {} if not text.strip() else load_document(text)


def _current(form: FormData, edited: str | None = None) -> Editor:
    """The job the page holds now: the YAML editor's, with the form's fields written in when
    the form was edited last; problems reading the YAML are shown above the editor."""
    text = str(form.get("yaml", ""))
    edited = edited or str(form.get("edited", EDITED_FORM))
    editor = Editor(yaml=text, fields=fields_from_form(form), clone_of=_clone_of(form))
    try:
        base = _base(text)
    except SpecError as exc:
        if edited == EDITED_FORM:
            editor.problems.append("the form's changes are not in the YAML until it reads again:")
        for error in exc.errors:
            editor.problems.append(str(error))
        return editor
    if edited == EDITED_YAML:
        editor.document = base
        editor.fields = fields_from_document(base)
        return editor
    editor.document, form_problems = apply_fields(base, editor.fields)
    editor.yaml = dump_yaml(editor.document)
    for name, message in form_problems.items():
        editor.errors.setdefault(name, []).append(message)
    return editor


def _operate(form: FormData, operation: str) -> Editor:
    """Add or remove a task role or an environment row: on the form and, for a role, on the
    document too, so roles still match the document's by position."""
    editor = _current(form)
    found = _OPERATION.fullmatch(operation)
    if editor.document is None or found is None:
        return editor
    roles = editor.fields.roles
    document = editor.document
    if operation == "add-role" and len(roles) < MAX_ROLES:
        taken = {role.name for role in roles}
        name = next(f"role{n}" for n in range(1, MAX_ROLES + 2) if f"role{n}" not in taken)
        roles.append(RoleFields(name=name, instances="1", gpu="1", cpu="1", memory_mb="1024",
                                commands=NEW_ROLE_COMMAND))
    elif found.group(2) is not None and int(found.group(2)) < len(roles):
        index = int(found.group(2))
        del roles[index]
        before = document.get("taskRoles") if isinstance(document, dict) else None
        if isinstance(before, dict) and index < len(before):
            del before[list(before)[index]]
    elif found.group(3) is not None and int(found.group(3)) < len(roles):
        roles[int(found.group(3))].env.append(("", ""))
    elif found.group(4) is not None and int(found.group(4)) < len(roles):
        env = roles[int(found.group(4))].env
        if int(found.group(5)) < len(env):
            del env[int(found.group(5))]
    editor.document, _ = apply_fields(document, editor.fields)
    editor.yaml = dump_yaml(editor.document)
    return editor


# --- checking and submitting ------------------------------------------------------------------


def _check(ctx: AppContext, viewer: Viewer, editor: Editor, *, submit: bool) -> int | None:
    """Check the job as ``POST /jobs?dryRun=true`` does (a clone: as the clone API does), and
    with ``submit`` queue it; the job's id, or None with the errors put on ``editor``."""
    if editor.document is None or editor.errors:  # unreadable YAML, or a role name given twice
        editor.status = 422
        return None
    changes = job_service.CloneChanges(document=editor.document)
    try:
        if editor.clone_of is not None:
            if submit:
                return submission.clone(ctx, viewer.user, editor.clone_of, changes).job_id
            warnings = submission.check_clone(ctx, viewer.user, editor.clone_of, changes)
        else:
            spec = validate_job(editor.document)
            if submit:
                return submission.submit(ctx, viewer.user, spec).job_id
            warnings = submission.dry_run(ctx, viewer.user, spec)
    except SpecError as exc:
        editor.status = 422
        for error in exc.errors:
            editor.refuse(error.path, error.message)
        return None
    except ServiceError as exc:
        editor.status = exc.status
        editor.problems.append(exc.message)
        for detail in exc.details:
            if form_field_of(detail["path"], editor.fields) is not None:
                editor.refuse(detail["path"], detail["message"])
        return None
    editor.warnings = warnings
    editor.notice = "the job can be submitted"
    return None


# --- rendering -----------------------------------------------------------------------------------


def _usable_vcs(ctx: AppContext, viewer: Viewer) -> list[str]:
    return [vc.name for vc in cluster_actions.vcs(ctx, viewer.user)]


def _render(request: Request, ctx: AppContext, viewer: Viewer, editor: Editor, template: str,
            status_code: int = 200, **values: Any) -> Response:
    return render(request, template, user=viewer.user, web_session=viewer.web_session, status_code=status_code,
                  editor=editor, fields=editor.fields, errors=editor.errors, vcs=_usable_vcs(ctx, viewer),
                  priorities=[str(p) for p in Priority], placeholders=PLACEHOLDERS, **values)


@router.get("/submit")
def submit_page(
    request: Request,
    viewer: Page,
    ctx: Ctx,
    clone: Annotated[int | None, Query(ge=1, le=MAX_ID, description="The job to copy")] = None,
) -> Response:
    document: Any = STARTER
    if clone is not None:
        document = masked_spec(job_actions.job_spec(ctx, viewer.user, clone))
    editor = Editor(yaml=dump_yaml(document), fields=fields_from_document(document), clone_of=clone,
                    document=document)
    return _render(request, ctx, viewer, editor, "submit.html", title=f"Clone job {clone}" if clone else "Submit")


@router.post("/submit")
async def submit(request: Request, viewer: Action, ctx: Ctx) -> Response:
    """Queue the job and go to its page; refused, the page again with the errors (from
    htmx: the form and the YAML editor, answered 200, as htmx swaps only those)."""
    editor = _current(await _posted(request))
    job_id = await run_in_threadpool(_check, ctx, viewer, editor, submit=True)
    htmx = bool(request.headers.get("hx-request"))
    if job_id is None:
        if htmx:
            return await run_in_threadpool(_render, request, ctx, viewer, editor, "submit_both.html")
        return await run_in_threadpool(_render, request, ctx, viewer, editor, "submit.html", editor.status,
                                       title="Submit")
    target = f"/jobs/{job_id}"
    if htmx:
        return Response(status_code=204, headers={"HX-Redirect": target, **SECURITY_HEADERS})
    return RedirectResponse(target, status_code=303, headers=SECURITY_HEADERS)


@router.post("/submit/to-yaml")
async def form_to_yaml(request: Request, viewer: Action, ctx: Ctx) -> Response:
    """The form was edited: the YAML editor again, with the form's values written in."""
    editor = _current(await _posted(request), EDITED_FORM)
    return await run_in_threadpool(_render, request, ctx, viewer, editor, "submit_yaml.html")


@router.post("/submit/to-form")
async def yaml_to_form(request: Request, viewer: Action, ctx: Ctx) -> Response:
    """The YAML was edited: the form again, read from it (and the YAML's problems, if any)."""
    editor = _current(await _posted(request), EDITED_YAML)
    return await run_in_threadpool(_render, request, ctx, viewer, editor, "submit_to_form.html")


@router.post("/submit/edit")
async def edit_form(request: Request, viewer: Action, ctx: Ctx) -> Response:
    """Add or remove a task role or an environment row: the form and the YAML again."""
    form = await _posted(request)
    editor = _operate(form, str(form.get("op", "")))
    return await run_in_threadpool(_render, request, ctx, viewer, editor, "submit_both.html")


@router.post("/submit/check")
async def check(request: Request, viewer: Action, ctx: Ctx) -> Response:
    """The dry run: every error at its field, the rest above the YAML editor. The answer is
    200 either way (htmx swaps only successful answers); its content says which."""
    editor = _current(await _posted(request))
    await run_in_threadpool(_check, ctx, viewer, editor, submit=False)
    return await run_in_threadpool(_render, request, ctx, viewer, editor, "submit_both.html")


@router.post("/submit/workdir")
async def attach_workdir(request: Request, viewer: Action, ctx: Ctx) -> Response:
    """Send the archive (.tar.gz or .tar) of a working directory with the job: stored as the
    API's ``PUT /workdirs`` stores it, its digest written into the job as ``workdir``."""
    form = await _posted(request, upload_limit=ctx.workdirs.max_bytes + (ctx.workdirs.max_bytes >> 3) + (4 << 20))
    editor = _current(form)
    upload = form.get("workdir_archive")
    if isinstance(upload, str) or upload is None or not upload.filename:
        editor.problems.append("choose the archive of your project folder first (git archive --format=tar.gz "
                               "-o project.tar.gz HEAD, or tar czf project.tar.gz -C project .)")
    elif editor.document is not None:
        try:
            sent = await run_in_threadpool(workdirs.upload, ctx, viewer.user, upload.file)
        except ServiceError as exc:
            editor.status = exc.status
            editor.problems.append(exc.message)
        else:
            editor.document = {**editor.document, "workdir": sent.digest}
            editor.yaml = dump_yaml(editor.document)
            editor.notice = (f"working directory {upload.filename} sent: {sent.files} files, {sent.sizeBytes} bytes "
                             f"({sent.digest[:19]}); every task starts in a copy of it")
    return await run_in_threadpool(_render, request, ctx, viewer, editor, "submit_both.html")


@router.post("/submit/export")
async def export_yaml(request: Request, viewer: Action) -> Response:
    """The job as a YAML file to save, named after the job."""
    editor = _current(await _posted(request))
    name = editor.fields.name if re.fullmatch(r"[A-Za-z0-9_-]{1,100}", editor.fields.name) else "job"
    return Response(editor.yaml, media_type="application/yaml",
                    headers={**SECURITY_HEADERS, "Content-Disposition": f'attachment; filename="{name}.yaml"'})
