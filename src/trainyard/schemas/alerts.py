"""The API's models of alerts: the rules with their settings, and the alerts they raised."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from trainyard.schemas.requests import RequestBody


class AlertRuleView(BaseModel):
    name: str
    subject: str  # job | node
    severity: str
    description: str
    enabled: bool
    params: dict[str, float]
    defaults: dict[str, float]
    cordon: bool  # cordon the node when it fires (node-health rules only)
    mayCordon: bool


class AlertRuleUpdate(RequestBody):
    """What to change in a rule; what is left out stays as it is."""

    enabled: bool | None = None
    params: dict[str, float] | None = Field(default=None, description="Thresholds by name, e.g. {\"days\": 7}")
    cordon: bool | None = None


class AlertView(BaseModel):
    id: int
    rule: str
    subject: str  # job:ID or node:NAME
    jobId: int | None
    node: str | None
    state: str  # firing | resolved
    severity: str
    message: str
    startedAt: datetime
    endedAt: datetime | None
