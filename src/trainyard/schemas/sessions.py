"""Interactive sessions in the API: what starting one takes, what a session shows."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field


class SessionRequest(BaseModel):
    """``POST /api/v1/sessions``: a JupyterLab session, scheduled like any job."""

    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, max_length=255, description="The session job's name (default: jupyterlab)")
    gpu: float = Field(default=0, ge=0, le=1024, description="GPUs: 0, a fraction of one (e.g. 0.5), or a whole number")
    cpu: float | None = Field(default=None, gt=0, le=4096, description="CPUs (default: the job file's default)")
    memoryMB: int | None = Field(default=None, gt=0, le=1 << 30, description="Memory in MiB")
    image: str | None = Field(default=None, max_length=512,
                              description="Run in this container image (it, or the environment, needs JupyterLab)")
    environment: str | None = Field(default=None, max_length=64,
                                    description="Run with this environment (`yard env`), in the image if any")
    storages: list[str] = Field(default_factory=list, max_length=32, description="Storages to mount, by name")
    hours: float | None = Field(default=None, gt=0, description="Lifetime in hours (default: the site's, 24)")
    virtualCluster: str | None = Field(default=None, max_length=64)
    priority: str | None = Field(default=None, max_length=16,
                                 description="A job priority (prod, normal, low, oppo: on idle GPUs, reclaimed first)")


class RenewRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hours: float | None = Field(default=None, gt=0, description="Live this long from now (default: the session's own)")


class SessionView(BaseModel):
    id: int  # the session's job id
    name: str
    user: str
    state: str  # the job's state
    stateMessage: str
    url: str  # where it opens, on yard up's address
    gpu: float
    hours: float
    expiresAt: datetime | None  # set once it runs
    renewals: int
    lastActivity: datetime | None
    idleSeconds: float | None  # None: not read yet
    kernels: int | None
    connections: int | None
    checkError: str
