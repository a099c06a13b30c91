"""Sending job notices (``rows.JobNoticeRow``): read the pending ones (one transaction),
send them (outside it: SMTP and HTTP may be slow), note the outcome (another). Run by the
alert tick (``alerting.py``), in its own thread beside the controller's loop, so a slow
mail server or webhook never holds up scheduling.

A notice that could not be sent is tried again at the next tick, up to ``MAX_TRIES`` times;
one that never can (no SMTP server, no address, a webhook refused as not public) fails at
once. A failed notice keeps its error, which its owner reads with ``yard job ID`` (the API's
``GET /jobs/{id}/notices``). Sent at least once: a server that stops between sending and
noting it sends that one again when it starts.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import httpx

from trainyard.core.clock import Clock
from trainyard.core.durations import format_duration
from trainyard.monitor.notify import SmtpSettings, send_message
from trainyard.monitor.webhooks import Refused, post_json
from trainyard.store.db import Database
from trainyard.store.queries import notices as notice_queries
from trainyard.store.rows import JobNoticeRow

log = logging.getLogger(__name__)

MAX_TRIES = 5


class Undeliverable(Exception):
    """This notice can never be sent as it stands."""


@dataclass(frozen=True)
class Outgoing:
    id: int
    channel: str
    target: str  # the webhook's URL, or the owner's address
    subject: str
    body: str
    payload: dict[str, object]
    tries: int


def _duration(started: datetime | None, ended: datetime | None) -> float | None:
    if started is None:
        return None
    return max(0.0, ((ended or started) - started).total_seconds())


def outgoing(row: JobNoticeRow, external_url: str) -> Outgoing:
    job, event = row.job, row.event
    link = f"{external_url}/jobs/{job.id}"
    seconds = _duration(job.started_at, job.finished_at or event.at)
    took = "never started" if seconds is None else f"ran {format_duration(round(seconds))}"  # not "ran 0.19875s"
    state = job.state if row.kind != "preempted" else f"{job.state} (preempted)"
    subject = f"[Trainyard] job {job.id} ({job.name}) {row.kind}"
    body = (f"Job {job.id} ({job.name}) {row.kind}: {event.message}\n\n"
            f"state:    {state}\nreason:   {job.state_message or event.message}\n"
            f"duration: {took}\nwhen:     {event.at.isoformat()}\n"
            + (f"exit:     {job.exit_code}\n" if job.exit_code is not None else "")
            + f"\n{link}\n")
    payload: dict[str, object] = {
        "version": "1", "kind": row.kind, "jobId": job.id, "name": job.name, "user": job.user.name,
        "virtualCluster": job.vc, "state": job.state, "reason": event.message, "exitCode": job.exit_code,
        "at": event.at.isoformat(), "submittedAt": job.submitted_at.isoformat(),
        "startedAt": job.started_at.isoformat() if job.started_at else None,
        "finishedAt": job.finished_at.isoformat() if job.finished_at else None,
        "durationSeconds": seconds, "url": link, "noticeId": row.id,
    }
    target = row.target if row.channel == notice_queries.WEBHOOK else (job.user.email or "")
    return Outgoing(row.id, row.channel, target, subject, body, payload, row.tries)


class JobNotices:
    def __init__(self, db: Database, clock: Clock, smtp: SmtpSettings | None, webhook_allow: Sequence[str] = (),
                 external_url: str = "") -> None:
        self.db, self.clock, self.smtp = db, clock, smtp
        self.webhook_allow = tuple(webhook_allow)
        self.external_url = external_url

    def run(self) -> int:
        """Send what is pending; how many were sent."""
        with self.db.session() as session:
            batch = [outgoing(row, self.external_url) for row in notice_queries.pending(session)]
        sent = 0
        for notice in batch:
            error, final = self._send(notice)
            with self.db.session() as session:
                row = notice_queries.notice_by_id(session, notice.id)
                if row is None:  # its job was deleted meanwhile
                    continue
                row.tries += 1
                if error is None:
                    row.state, row.sent_at, row.error = notice_queries.SENT, self.clock.now(), None
                    sent += 1
                else:
                    row.error = error
                    if final or row.tries >= MAX_TRIES:
                        row.state = notice_queries.FAILED
                        log.warning("job %s's %s notice failed for good: %s", row.job_id, row.channel, error)
        return sent

    def _send(self, notice: Outgoing) -> tuple[str | None, bool]:
        """(None, _) when sent; else the error and whether it is final."""
        try:
            if notice.channel == notice_queries.EMAIL:
                if self.smtp is None:
                    raise Undeliverable("this server sends no e-mail (no SMTP server set); ask the admin")
                if not notice.target:
                    raise Undeliverable("the account has no e-mail address (yard account email ADDRESS)")
                send_message(self.smtp, notice.target, notice.subject, notice.body)
            else:
                post_json(notice.target, notice.payload, self.webhook_allow)
        except (Undeliverable, Refused) as exc:
            return str(exc), True
        except (OSError, httpx.HTTPError) as exc:
            log.info("could not send notice %s (try %d of %d): %s", notice.id, notice.tries + 1, MAX_TRIES, exc)
            return f"{type(exc).__name__}: {exc}"[:500], False
        except Exception as exc:  # noqa: BLE001 - smtplib's own errors and the like: noted, tried again
            return f"{type(exc).__name__}: {exc}"[:500], False
        return None, False
