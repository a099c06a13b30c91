"""Telling people about alerts: an Alertmanager-compatible webhook payload, and e-mail.

The payload is Alertmanager's webhook format (version "4"): ``status`` (firing when any
alert in it fires), ``alerts[]`` with ``labels`` (``alertname`` = the rule, ``severity``,
``job``/``user``/``vc`` or ``node``), ``annotations`` (``summary``, ``description``),
``startsAt``/``endsAt`` (RFC 3339; Alertmanager's zero time while firing) and a
``fingerprint``. Delivery raises ``OSError`` (or ``httpx.HTTPError``) on failure; the
caller logs it and tries again at the next evaluation.
"""

from __future__ import annotations

import hashlib
import smtplib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from email.message import EmailMessage
from typing import Any

import httpx

ZERO_TIME = "0001-01-01T00:00:00Z"  # Alertmanager's "not ended"
TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class Notice:
    """One alert as it is told."""

    id: int
    rule: str
    state: str  # firing | resolved
    severity: str
    message: str
    started_at: datetime
    ended_at: datetime | None
    labels: Mapping[str, str]


@dataclass(frozen=True)
class SmtpSettings:
    host: str
    port: int
    sender: str
    recipients: Sequence[str]
    starttls: bool = False
    username: str | None = None
    password: str | None = None


def _rfc3339(at: datetime | None) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if at is not None else ZERO_TIME


def alertmanager_payload(notices: Sequence[Notice], external_url: str = "") -> dict[str, Any]:
    alerts = []
    for n in notices:
        # Plain strings: a rule named by its enum would hash differently from the same rule
        # read back from the store, and one alert must keep one fingerprint from firing to resolved.
        labels = {key: str(value) for key, value in {"alertname": n.rule, "severity": n.severity, **n.labels}.items()}
        fingerprint = hashlib.sha256(repr(sorted(labels.items())).encode()).hexdigest()[:16]
        alerts.append({
            "status": n.state,
            "labels": labels,
            "annotations": {"summary": f"{n.rule}: {n.message}", "description": n.message,
                            "trainyard_alert_id": str(n.id)},
            "startsAt": _rfc3339(n.started_at),
            "endsAt": _rfc3339(n.ended_at) if n.state == "resolved" else ZERO_TIME,
            "generatorURL": f"{external_url}/api/v1/alerts" if external_url else "",
            "fingerprint": fingerprint,
        })
    return {
        "version": "4",
        "groupKey": "{}:{trainyard}",
        "truncatedAlerts": 0,
        "status": "firing" if any(n.state == "firing" for n in notices) else "resolved",
        "receiver": "trainyard",
        "groupLabels": {},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": external_url,
        "alerts": alerts,
    }


def send_webhook(url: str, notices: Sequence[Notice], external_url: str = "") -> None:
    response = httpx.post(url, json=alertmanager_payload(notices, external_url), timeout=TIMEOUT_SECONDS)
    response.raise_for_status()


def send_email(smtp: SmtpSettings, notices: Sequence[Notice]) -> None:
    firing = sum(n.state == "firing" for n in notices)
    mail = EmailMessage()
    mail["From"] = smtp.sender
    mail["To"] = ", ".join(smtp.recipients)
    mail["Subject"] = f"[Trainyard] {firing} firing, {len(notices) - firing} resolved alert(s)"
    mail.set_content("\n".join(f"[{n.state.upper()}] #{n.id} {n.rule}: {n.message}" for n in notices) + "\n")
    _send(smtp, mail)


def send_message(smtp: SmtpSettings, recipient: str, subject: str, body: str) -> None:
    """One plain-text e-mail to one recipient (a job's notice to its owner), through the
    alerts' SMTP server and sender; ``smtp.recipients`` is not used."""
    mail = EmailMessage()
    mail["From"] = smtp.sender
    mail["To"] = recipient
    mail["Subject"] = subject
    mail.set_content(body)
    _send(smtp, mail)


def _send(smtp: SmtpSettings, mail: EmailMessage) -> None:
    with smtplib.SMTP(smtp.host, smtp.port, timeout=TIMEOUT_SECONDS) as client:
        if smtp.starttls:
            client.starttls()
        if smtp.username:
            client.login(smtp.username, smtp.password or "")
        client.send_message(mail)
