"""A working directory sent with jobs, as the API shows it."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field


class WorkdirView(BaseModel):
    digest: str = Field(description="sha256:<hex> of its canonical tar: the job file's `workdir` names it")
    sizeBytes: int = Field(description="its files' bytes, unpacked")
    files: int = Field(description="how many regular files it holds")
    createdAt: datetime | None = Field(default=None, description="when its owner first sent it")


class WorkdirLimits(BaseModel):
    maxBytes: int = Field(description="the most bytes of files a working directory may hold (workdir_max_mb)")
