"""The API's models of job notices: a user's address and default, and a job's notices."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from trainyard.schemas.requests import RequestBody, text_field


class NotifySettings(RequestBody):
    """Which events of one's jobs to be told of, and how (a job file's ``notify`` overrides)."""

    on: list[str] = Field(default_factory=list, max_length=5,
                          description="succeeded, failed, stopped, ended (any of those), preempted; [] for none")
    email: bool = Field(default=True, description="e-mail them to the account's address")
    webhook: str | None = text_field(2000, default=None, description="POST them, as JSON, to this http(s) URL")


class EmailRequest(RequestBody):
    email: str | None = text_field(254, default=None, description="where notices are e-mailed; null removes it")


class AccountNotifyView(BaseModel):
    user: str
    email: str | None = Field(description="the account's address: notices are e-mailed only there")
    notify: NotifySettings | None = Field(description="the default for jobs whose file has no `notify`")
    emailEnabled: bool = Field(description="whether this server sends e-mail (an SMTP server is set)")


class JobNoticeView(BaseModel):
    id: int
    jobId: int
    kind: str = Field(description="succeeded, failed, stopped or preempted")
    channel: str = Field(description="email or webhook")
    state: str = Field(description="pending, sent or failed (after its last try)")
    tries: int
    error: str | None
    createdAt: datetime
    sentAt: datetime | None
