"""What the API says of sweeps (``/api/v1/sweeps``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel

from trainyard.core.states import JobState
from trainyard.schemas.jobs import PendingView


class SweepMember(BaseModel):
    index: int
    params: dict[str, Any]  # the point: the parameters this member overrides
    jobId: int
    name: str
    state: JobState
    pending: PendingView | None = None
    metric: str | None = None  # the sweep's metric as this member last showed it; None: not yet


class SweepSummary(BaseModel):
    id: int
    name: str
    user: str
    createdAt: datetime
    size: int  # how many jobs it made
    parallel: int | None  # how many may run at once (None: as many as fit)
    metric: dict[str, str] | None  # {pattern: REGEX} or {name: NAME}; None: none shown
    states: dict[str, int]  # how many members are in each state
    ended: bool  # every member has ended


class SweepDetail(SweepSummary):
    members: list[SweepMember]


class SweepPage(BaseModel):
    items: list[SweepSummary]
    next: int | None  # pass as ``before`` for the next page; None on the last


class SweepStopResult(BaseModel):
    stopped: list[int]  # the members told to stop
    refused: dict[int, str]  # the others and why (most: ended already)
