"""The API's models of cluster administration: virtual clusters, groups and per-user quotas,
the requests that change them and what they answer, and what a removal did to jobs."""

from __future__ import annotations

from pydantic import BaseModel, Field

from trainyard.core.labels import MAX_LABELS
from trainyard.core.names import GROUP_OR_VC_NAME
from trainyard.core.priorities import PRIORITY_NAMES
from trainyard.schemas.requests import RequestBody, WholeNumber, text_field


class CreateVcRequest(RequestBody):
    name: str = text_field(64, rule=GROUP_OR_VC_NAME)
    gpus: WholeNumber = Field(ge=0, le=1_000_000, description="Guaranteed whole GPUs")
    model: str | None = text_field(64, default=None, description="GPU model; default: any")
    priorityPreemption: bool = Field(default=True, description="May higher priorities preempt lower ones")


class QuotaRequest(RequestBody):
    gpus: WholeNumber = Field(ge=0, le=1_000_000, description="Guaranteed whole GPUs; 0 removes the model")
    model: str | None = text_field(64, default=None)


class GrantRequest(RequestBody):
    grantee: str = text_field(65, description="A user name, or @group")


class NameRequest(RequestBody):
    name: str = text_field(64, rule=GROUP_OR_VC_NAME)


class MemberRequest(RequestBody):
    user: str = text_field(64)


class UserQuotaRequest(RequestBody):
    priority: str = text_field(16, description=f"{', '.join(PRIORITY_NAMES[:-1])} or {PRIORITY_NAMES[-1]}",
                               json_schema_extra={"enum": list(PRIORITY_NAMES)})
    gpus: float | None = Field(ge=0, le=1_000_000, description="At most this many GPUs; null removes the limit")


class NodeLabelsRequest(RequestBody):
    """Label changes: a value sets a label, null removes it (``kubectl label``'s ``key-``)."""

    labels: dict[str, str | None] = Field(min_length=1, max_length=MAX_LABELS)


class VcView(BaseModel):
    name: str
    quota: dict[str, int]  # GPU model (ANY_MODEL: any model) -> guaranteed GPUs; for DEFAULT_VC, what no VC guarantees
    used: float  # GPUs held by the VC's guaranteed jobs
    borrowed: float  # GPUs held by the VC's opportunistic jobs
    waiting: int
    priorityPreemption: bool
    users: list[str]
    groups: list[str]


class GroupView(BaseModel):
    name: str
    members: list[str]


class UserQuotaView(BaseModel):
    user: str
    priority: str
    gpus: float


class RemovalResult(BaseModel):
    """What a removal (or disabling a user) did, and to which waiting or running jobs."""

    done: str = Field(description="What was done, in words, e.g. 'deleted virtual cluster vision'")
    stoppedJobs: list[int] = Field(description="Jobs it stopped: waiting ones at once, running ones are STOPPING")
    keptJobs: list[int] = Field(description="Waiting or running jobs it left alone (disabling without stopJobs)")
