"""The job file's ``notify`` section: which of the job's events its owner is told of, and
how — ``notify: {on: [failed, preempted], email: true, webhook: "https://…"}``.

E-mail goes only to the owner's own address (``yard account email``), never to one a job
file names. ``email`` and ``webhook`` left out are the owner's account default
(``yard account notify``); ``email`` is on when neither says. The webhook's host is checked
again by the server (``monitor.webhooks``): here only its form.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field
from pydantic_core import PydanticCustomError

from trainyard.spec.errors import show

# What ``on`` accepts (``core.notices.NOTICE_CLASSES`` repeats them).
NOTIFY_ON = ("succeeded", "failed", "stopped", "ended", "preempted")
MAX_URL_CHARS = 2000


def _invalid(message: str) -> PydanticCustomError:
    return PydanticCustomError("spec", "{message}", {"message": message})


def notify_on(value: Any) -> list[str]:
    """``failed,ended`` or ``[failed, ended]`` as a list of known names."""
    if value is None:
        return []
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list):
        raise _invalid(f"must be a list of {', '.join(NOTIFY_ON)} (got {show(value)})")
    names: list[str] = []
    for item in items:
        name = item.strip().lower() if isinstance(item, str) else item
        if name not in NOTIFY_ON:
            raise _invalid(f"must name events among {', '.join(NOTIFY_ON)} (got {show(item)})")
        if name not in names:
            names.append(name)
    return names


def webhook_url(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    if len(value) > MAX_URL_CHARS:
        raise _invalid(f"must be at most {MAX_URL_CHARS} characters")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise _invalid(f"is not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise _invalid(f"must be an http:// or https:// URL with a host (got {show(value)})")
    return value


class Notify(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    on: Annotated[list[str], BeforeValidator(notify_on)] = Field(default_factory=list)
    email: bool | None = None
    webhook: Annotated[str | None, AfterValidator(webhook_url)] = None
