"""The alert tick: evaluate the rules (one transaction), then tell the receivers (outside
it), then note who heard what — every ``alert_interval_seconds``, in a thread of its own
beside the controller's loop (``periodic.py``), so that a slow receiver (a webhook that
times out) never holds up scheduling.

A receiver that fails (webhook down, SMTP refusing) is logged and asked again at the next
evaluation; one that heard an alert's state is never told it again, unless the alert,
still firing, now tells of another problem (``services.alerts.evaluate``). Nothing here may
stop the controller.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx

from trainyard.controller.job_notices import JobNotices
from trainyard.controller.periodic import Periodic
from trainyard.core.clock import Clock
from trainyard.core.settings import DEFAULT_MONITOR_INTERVAL_SECONDS
from trainyard.monitor.notify import Notice, SmtpSettings, send_email, send_webhook
from trainyard.services import alerts as alert_service
from trainyard.store.db import Database

log = logging.getLogger(__name__)

EMAIL = "email"


@dataclass(frozen=True)
class Receivers:
    webhook_urls: Sequence[str] = ()
    smtp: SmtpSettings | None = None
    external_url: str = ""  # the server's own address, for the payload's links
    # Job notices (``job_notices.py``), sent by the same tick: the SMTP server (recipients
    # unused: each goes to its job's owner) and the non-public hosts webhooks may reach.
    job_smtp: SmtpSettings | None = None
    webhook_allow: Sequence[str] = ()

    def names(self) -> list[str]:
        return [f"webhook:{u}" for u in self.webhook_urls] + ([EMAIL] if self.smtp is not None else [])


class AlertEvaluator(Periodic):
    """Evaluates the alert rules and notifies; ``on_cordon`` (the controller's wake) is
    called when an alert cordoned a node, so that the scheduler looks again."""

    thread_name = "trainyard-alerts"

    def __init__(
        self, db: Database, clock: Clock, interval: float, receivers: Receivers | None = None,
        on_cordon: Callable[[], None] | None = None,
        monitor_interval_seconds: float = DEFAULT_MONITOR_INTERVAL_SECONDS,
    ) -> None:
        super().__init__(clock, interval)
        self.db = db
        self.monitor_interval = monitor_interval_seconds  # some rules' defaults follow it
        self.receivers = receivers or Receivers()
        self.on_cordon = on_cordon
        self._utilisation = alert_service.WindowedUtilisation()
        self.job_notices = JobNotices(db, clock, self.receivers.job_smtp, self.receivers.webhook_allow,
                                      self.receivers.external_url)
        self._notices: threading.Thread | None = None

    def run_logged(self) -> None:
        try:
            self.run()
        except Exception:  # noqa: BLE001 - retried at the next interval; the controller goes on
            log.exception("evaluating the alert rules failed; trying again at the next interval")
        # Users' notices go in a thread of their own: a slow receiver of a user's (each post
        # is bounded, but there may be many) must not hold back the admins' alerts next tick.
        if self._notices is None or not self._notices.is_alive():
            self._notices = threading.Thread(target=self._send_notices, name="trainyard-job-notices", daemon=True)
            self._notices.start()

    def _send_notices(self) -> None:
        try:
            self.job_notices.run()
        except Exception:  # noqa: BLE001 - the same: the pending notices wait for the next interval
            log.exception("sending job notices failed; trying again at the next interval")

    def join(self, timeout: float | None = None) -> None:
        super().join(timeout)
        if self._notices is not None:
            self._notices.join(timeout)

    def run(self) -> None:
        """Evaluate now and deliver what each receiver has not heard."""
        with self.db.session() as session:
            opened, changed, resolved = alert_service.evaluate(
                session, self.clock, self.monitor_interval, self._utilisation)
            cordoned = any(a.message.endswith(alert_service.CORDONED) for a in opened)
            for alert in opened:
                log.warning("alert %s firing: %s", alert.id, alert.message)
            for alert in changed:
                log.warning("alert %s firing, now: %s", alert.id, alert.message)
            for alert in resolved:
                log.info("alert %s resolved: %s", alert.id, alert.message)
            names = self.receivers.names()
            pending = alert_service.unheard(session, names) if names else {}
        if cordoned and self.on_cordon is not None:
            self.on_cordon()
        for receiver, notices in pending.items():
            if notices and self._deliver(receiver, notices):
                with self.db.session() as session:
                    alert_service.mark_heard(session, receiver, notices)

    def _deliver(self, receiver: str, notices: list[Notice]) -> bool:
        try:
            if receiver == EMAIL:
                assert self.receivers.smtp is not None
                send_email(self.receivers.smtp, notices)
            else:
                send_webhook(receiver.removeprefix("webhook:"), notices, self.receivers.external_url)
        except (OSError, httpx.HTTPError) as error:
            log.warning("could not notify %s of %d alert(s) (trying again at the next evaluation): %s",
                        receiver, len(notices), error)
            return False
        return True
