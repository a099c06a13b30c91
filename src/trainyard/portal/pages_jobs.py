"""The Jobs page: the job list with its filters (GET query parameters, so a view can be
bookmarked), its order and cursor paging, as ``GET /api/v1/jobs`` serves them; stopping the
selected jobs; and the admin's Stop of a job flagged abnormal on the home page."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response

from trainyard.core.states import JobState
from trainyard.portal.auth import Action, AdminAction, Page, Viewer
from trainyard.portal.templating import SECURITY_HEADERS, render
from trainyard.services import job_actions
from trainyard.services import jobs as job_service
from trainyard.services import sweeps as sweep_service
from trainyard.services.errors import Invalid
from trainyard.services.jobs import StopOutcome
from trainyard.web.bodies import MAX_ID
from trainyard.web.context import AppContext, context

router = APIRouter()

Ctx = Annotated[AppContext, Depends(context)]
PAGE_SIZE = 50
MOST_STOPPED_AT_ONCE = job_service.MAX_PAGE
STOPPABLE = (JobState.WAITING, JobState.SUSPENDED, JobState.RUNNING)
# The state filter's choices: each state, and the unfinished ones together.
STATE_CHOICES = (("", "any state"), ("WAITING,SUSPENDED,RUNNING,STOPPING", "unfinished"),
                 *((state.value, state.value) for state in JobState))


# The columns a click on the list's header sorts by (again: the other way).
SORTED_BY = tuple(o for o in job_service.JOB_ORDERS if o not in ("newest", "oldest") and not o.startswith("-"))

def _text(value: str | None) -> str | None:
    """A filter as a GET form sends it: an empty field means no filter."""
    value = (value or "").strip()
    return value or None


class JobFilters:
    """The list's query parameters: its filters, its order and the cursor."""

    def __init__(
        self,
        state: Annotated[str | None, Query(max_length=128)] = None,
        user: Annotated[str | None, Query(max_length=64)] = None,
        vc: Annotated[str | None, Query(max_length=64)] = None,
        name: Annotated[str | None, Query(max_length=128)] = None,
        order: Annotated[str, Query(max_length=16)] = "newest",
        before: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
        after: Annotated[int | None, Query(ge=0, le=MAX_ID)] = None,
    ) -> None:
        self.state, self.user, self.vc, self.name = _text(state), _text(user), _text(vc), _text(name)
        self.order = order or "newest"
        self.before, self.after = before, after

    def query(self, **changes: str | int | None) -> str:
        """The query string of this view with ``changes`` (None drops a parameter); the
        cursor is dropped unless given, so that a changed filter starts at the first page."""
        values: dict[str, str | int | None] = {
            "state": self.state, "user": self.user, "vc": self.vc, "name": self.name,
            "order": None if self.order == "newest" else self.order,
        }
        values.update(changes)
        return urlencode({k: v for k, v in values.items() if v is not None})

    @property
    def paged(self) -> bool:
        return self.before is not None or self.after is not None


Filters = Annotated[JobFilters, Depends()]


def _list_page(request: Request, viewer: Viewer, ctx: AppContext, filters: JobFilters, *,
               outcome: StopOutcome | None = None, status_code: int = 200) -> Response:
    page = job_actions.job_page(ctx, viewer.user, state=filters.state, user=filters.user, vc=filters.vc,
                                text=filters.name, order=filters.order, limit=PAGE_SIZE, before=filters.before,
                                after=filters.after)
    jobs, next_cursor = page.items, page.next
    cursor = "after" if filters.order == "oldest" else "before"
    return render(
        request, "jobs.html", user=viewer.user, web_session=viewer.web_session, status_code=status_code,
        jobs=jobs, filters=filters, states=STATE_CHOICES, stoppable=STOPPABLE, outcome=outcome,
        next_page=filters.query(**{cursor: next_cursor}) if next_cursor is not None else None,
        first_page=filters.query() if filters.paged else None,
        other_order=filters.query(order="newest" if filters.order == "oldest" else "oldest"),
        sort_links={column: filters.query(order=f"-{column}" if filters.order == column else column)
                    for column in SORTED_BY},
        this_view=request.url.query,
        sweep_of=sweep_service.sweeps_of_jobs(ctx, [j.id for j in jobs]),  # jobs the viewer sees
    )


@router.get("/jobs")
def jobs_page(request: Request, viewer: Page, ctx: Ctx, filters: Filters) -> Response:
    return _list_page(request, viewer, ctx, filters)


@router.post("/jobs/stop")
async def stop_selected(request: Request, viewer: Action, ctx: Ctx, filters: Filters) -> Response:
    """Stop the jobs ticked on the list (form fields ``job``), each as ``POST /jobs/{id}/stop``
    would; the list comes back, as it was filtered, saying which stopped and which could not."""
    form = await request.form()
    values = [str(v) for v in form.getlist("job")]
    wrong = [v for v in values if not (v.isascii() and v.isdigit() and 1 <= int(v) <= MAX_ID)]
    if wrong:
        raise Invalid(f"job: {wrong[0][:20]!r} is not a job id", details=[{"path": "job", "message": "not a job id"}])
    if len(values) > MOST_STOPPED_AT_ONCE:
        raise Invalid(f"job: at most {MOST_STOPPED_AT_ONCE} jobs at once",
                      details=[{"path": "job", "message": "too many"}])
    if not values:
        raise Invalid("job: tick the jobs to stop first", details=[{"path": "job", "message": "none selected"}])
    outcome = await run_in_threadpool(job_actions.stop_many, ctx, viewer.user, [int(v) for v in values])
    return await run_in_threadpool(_list_page, request, viewer, ctx, filters, outcome=outcome)


@router.post("/alerts/{alert_id}/stop")
def stop_flagged_job(alert_id: Annotated[int, Path(ge=1, le=MAX_ID)], viewer: AdminAction, ctx: Ctx) -> Response:
    """The home page's Stop of a job an alert flagged (admin); its owner reads why."""
    job_actions.stop_flagged(ctx, viewer.user, alert_id)
    return RedirectResponse("/", status_code=303, headers=SECURITY_HEADERS)
