"""A user is told when their job ends, fails or is preempted: their address and default
(``yard account``), the checks a job's or a default's ``notify`` must pass, and a job's
notices as its owner sees them (sent, pending, or failed and why).

The notices themselves are queued with the events they tell of (``store.queries.notices``)
and sent by the alert tick (``controller/job_notices.py``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from sqlalchemy.orm import Session

from trainyard.core.notices import NOTICE_CLASSES
from trainyard.monitor.webhooks import Refused, check_url
from trainyard.schemas.notices import AccountNotifyView, JobNoticeView, NotifySettings
from trainyard.services.errors import Forbidden, Invalid, NotFound
from trainyard.spec.models import JobSpec
from trainyard.spec.notify import webhook_url
from trainyard.store.db import Database
from trainyard.store.queries import jobs as job_queries
from trainyard.store.queries import notices as notice_queries
from trainyard.store.queries import users as user_queries
from trainyard.store.rows import JobNoticeRow, UserRow

# Deliberately plain: one @, no spaces or line breaks (it becomes a header), a dot in the domain.
EMAIL = re.compile(r"[^@\s,;<>\"']{1,64}@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+")


def _invalid(path: str, message: str) -> Invalid:
    return Invalid(f"{path}: {message}", details=[{"path": path, "message": message}])


def check_webhook(url: str | None, allow: Sequence[str], path: str) -> None:
    """422 with ``path`` unless ``url`` may be posted to (its form, and its host when that
    is an address or a local name; resolved names are checked again when sending)."""
    if url is None:
        return
    try:
        webhook_url(url)
        check_url(url, allow)
    except Refused as exc:
        raise _invalid(path, f"{exc}") from None
    except ValueError as exc:  # the spec's own message
        raise _invalid(path, str(exc)) from None


def check_job_notify(spec: JobSpec, allow: Sequence[str]) -> None:
    if spec.notify is not None:
        check_webhook(spec.notify.webhook, allow, "notify.webhook")


def _target(session: Session, viewer: UserRow, name: str | None) -> UserRow:
    target = viewer if name is None or name == viewer.name else None
    if target is None:
        if not viewer.is_admin:
            raise Forbidden("only an admin may see or change another user's notices")
        target = user_queries.user_named(session, name or "")
        if target is None or target.deleted_at is not None:
            raise NotFound(f"no user named {name!r}; see `yard user list`")
    else:
        target = user_queries.user_by_id(session, viewer.id) or viewer
    return target


def account_view(user: UserRow, *, email_enabled: bool) -> AccountNotifyView:
    settings = NotifySettings.model_validate(user.notify, strict=False) if user.notify else None
    return AccountNotifyView(user=user.name, email=user.email, notify=settings, emailEnabled=email_enabled)


def account(session: Session, viewer: UserRow, name: str | None, *, email_enabled: bool) -> AccountNotifyView:
    return account_view(_target(session, viewer, name), email_enabled=email_enabled)


def set_default(session: Session, viewer: UserRow, name: str | None, settings: NotifySettings,
                allow: Sequence[str], *, email_enabled: bool) -> AccountNotifyView:
    """Set (``on`` empty: clear) the default for jobs whose file has no ``notify``."""
    unknown = [n for n in settings.on if n not in NOTICE_CLASSES]
    if unknown:
        raise _invalid("on", f"must name events among {', '.join(NOTICE_CLASSES)} (got {unknown[0]!r})")
    check_webhook(settings.webhook, allow, "webhook")
    target = _target(session, viewer, name)
    if settings.email and settings.on and not target.email:
        raise _invalid("email", f"{target.name} has no e-mail address: set one first (yard account email ADDRESS)")
    target.notify = (None if not settings.on else
                     {"on": list(dict.fromkeys(settings.on)), "email": settings.email,
                      "webhook": settings.webhook})
    session.flush()
    return account_view(target, email_enabled=email_enabled)


def set_email(session: Session, viewer: UserRow, name: str | None, address: str | None, *,
              email_enabled: bool) -> AccountNotifyView:
    """Set (None: remove) where a user's notices are e-mailed: by them, or an admin."""
    if address is not None:
        address = address.strip()
        if len(address) > 254 or not EMAIL.fullmatch(address):
            raise _invalid("email", f"is not an e-mail address (got {address[:60]!r}); e.g. ada@example.org")
    target = _target(session, viewer, name)
    target.email = address or None
    session.flush()
    return account_view(target, email_enabled=email_enabled)


def notice_view(row: JobNoticeRow) -> JobNoticeView:
    return JobNoticeView(id=row.id, jobId=row.job_id, kind=row.kind, channel=row.channel, state=row.state,
                         tries=row.tries, error=row.error, createdAt=row.created_at, sentAt=row.sent_at)


def job_notices(session: Session, viewer: UserRow, job_id: int) -> list[JobNoticeView]:
    """A job's notices, for its owner or an admin (as its logs)."""
    job = job_queries.job_by_id(session, job_id)
    if job is None or (not viewer.is_admin and job.user_id != viewer.id):
        raise NotFound(f"no job {job_id}")
    return [notice_view(r) for r in notice_queries.job_notices(session, job_id)]


# Each in its own unit of work, for the API and the portal.

def read_account(db: Database, viewer: UserRow, name: str | None, *, email_enabled: bool) -> AccountNotifyView:
    with db.session() as session:
        return account(session, viewer, name, email_enabled=email_enabled)


def change_default(db: Database, viewer: UserRow, name: str | None, settings: NotifySettings,
                   allow: Sequence[str], *, email_enabled: bool) -> AccountNotifyView:
    with db.session() as session:
        return set_default(session, viewer, name, settings, allow, email_enabled=email_enabled)


def change_email(db: Database, viewer: UserRow, name: str | None, address: str | None, *,
                 email_enabled: bool) -> AccountNotifyView:
    with db.session() as session:
        return set_email(session, viewer, name, address, email_enabled=email_enabled)


def read_job_notices(db: Database, viewer: UserRow, job_id: int) -> list[JobNoticeView]:
    with db.session() as session:
        return job_notices(session, viewer, job_id)
