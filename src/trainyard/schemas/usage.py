"""The API's models of usage accounting: GPU-, CPU- and memory-hours per job, user, VC or
group over a period, with efficiencies (``GET /usage``)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

UsageGrouping = Literal["user", "vc", "group", "job"]


class UsageLine(BaseModel):
    """One line of a report. Hours are allocated (what was held); ``gpuHoursUsed`` and the
    efficiencies come from monitoring, ``None`` ("n/a") when nothing was measured."""

    name: str  # the user, VC or group name; the job id for a report by job
    jobs: int  # jobs that held something in the period
    gpuHours: float
    gpuHoursUsed: float | None
    gpuEfficiency: float | None = Field(description="GPU-hours used / allocated, 0..1, over the measured time")
    cpuHours: float
    cpuEfficiency: float | None = Field(description="CPU core-hours used / allocated, over the measured time")
    memoryGibHours: float  # GiB (1024 MiB) held x hours
    # Fair share: GPU-hours decayed to the report's moment with the scheduler's half-life
    # (``UsageReport.fairShareHalfLifeSeconds``), from every run, not only the period's;
    # None when fair share is off. ``recentBorrowedGpuHours``: the part on borrowed GPUs.
    recentGpuHours: float | None = None
    recentBorrowedGpuHours: float | None = None
    jobName: str | None = None  # a report by job: the job's name, user and VC
    user: str | None = None
    vc: str | None = None


class UsageReport(BaseModel):
    by: UsageGrouping
    since: datetime
    until: datetime  # the period is [since, until); a running task counts up to the moment asked
    lines: list[UsageLine]
    total: UsageLine  # the jobs of every line once (a user in two groups is counted once here)
    # The half-life of the fair-share figures (``recentGpuHours``); None: fair share is off.
    fairShareHalfLifeSeconds: float | None = None
