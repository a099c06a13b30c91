"""The API's models of cluster administration: virtual clusters, groups and per-user quotas,
the requests that change them and what they answer, and what a removal did to jobs."""

from __future__ import annotations

from pydantic import BaseModel, Field, field_validator
from pydantic_core import PydanticCustomError

from trainyard.core.keep import KEEP as KEEP
from trainyard.core.keep import Keep as Keep
from trainyard.core.labels import MAX_LABELS
from trainyard.core.names import GROUP_OR_VC_NAME
from trainyard.core.priorities import PRIORITY_NAMES
from trainyard.core.sharing import DEFAULT_GPU_SHARING, GPU_SHARING_NAMES
from trainyard.schemas.requests import RequestBody, WholeNumber, text_field

GPU_SHARING_HELP = (
    "Whose fractional GPU shares this VC's jobs may share a device with: same-user (default), same-group "
    "(users with a group in common) or anyone; where two VCs' jobs meet, the stricter rule applies"
)


BORROW_LIMIT_HELP = ("Whole GPUs of each model its jobs may hold beyond its quota, as borrowed work on other VCs' "
                     "idle GPUs; null: no limit, 0: it never borrows")
LEND_LIMIT_HELP = ("Whole GPUs of each model of its unused quota other VCs may borrow; null: all of them, "
                   "0: it never lends")
WEIGHT_HELP = "Its share of idle GPUs against the other VCs that want them (default 1)"
MAX_WEIGHT = 1000.0
MIN_WEIGHT = 0.001  # below it a weight means nothing more than "last", and prints badly
MAX_GPU_LIMIT = 1_000_000


class CreateVcRequest(RequestBody):
    name: str = text_field(64, rule=GROUP_OR_VC_NAME)
    gpus: WholeNumber = Field(ge=0, le=1_000_000, description="Guaranteed whole GPUs")
    model: str | None = text_field(64, default=None, description="GPU model; default: any")
    priorityPreemption: bool = Field(default=True, description="May higher priorities preempt lower ones")
    gpuSharing: str = text_field(16, default=DEFAULT_GPU_SHARING.value, description=GPU_SHARING_HELP,
                                 json_schema_extra={"enum": list(GPU_SHARING_NAMES)})
    borrowLimit: WholeNumber | None = Field(default=None, ge=0, le=MAX_GPU_LIMIT, description=BORROW_LIMIT_HELP)
    lendLimit: WholeNumber | None = Field(default=None, ge=0, le=MAX_GPU_LIMIT, description=LEND_LIMIT_HELP)
    weight: float = Field(default=1.0, ge=MIN_WEIGHT, le=MAX_WEIGHT, allow_inf_nan=False, description=WEIGHT_HELP)


class BorrowingRequest(RequestBody):
    """A VC's borrowing settings: a field left out stays as it is; a limit set to null is no limit."""

    borrowLimit: WholeNumber | None = Field(default=None, ge=0, le=MAX_GPU_LIMIT, description=BORROW_LIMIT_HELP)
    lendLimit: WholeNumber | None = Field(default=None, ge=0, le=MAX_GPU_LIMIT, description=LEND_LIMIT_HELP)
    weight: float | None = Field(default=None, ge=MIN_WEIGHT, le=MAX_WEIGHT, allow_inf_nan=False,
                                 description=WEIGHT_HELP)

    @field_validator("weight")
    @classmethod
    def _weight_given_is_a_number(cls, value: float | None) -> float | None:
        if value is None:  # only a given value is validated: left out, it stays as it is
            raise PydanticCustomError("null", "a number > 0 and at most 1000; leave weight out to keep it")
        return value


class SharingRequest(RequestBody):
    gpuSharing: str = text_field(16, description=GPU_SHARING_HELP, json_schema_extra={"enum": list(GPU_SHARING_NAMES)})


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
    used: float  # GPUs held by the VC's guaranteed work within its quota
    borrowed: float  # GPUs its guaranteed jobs hold beyond its quota: attempts running borrowed
    opportunistic: float = 0.0  # GPUs its opportunistic (oppo) jobs hold, on any idle GPU
    waiting: int
    priorityPreemption: bool
    gpuSharing: str  # core.sharing.GpuSharing
    borrowLimit: int | None = None  # whole GPUs of each model it may borrow (None: no limit)
    lendLimit: int | None = None  # whole GPUs of each model of its unused quota it lends (None: all)
    weight: float = 1.0  # its share of idle GPUs against other borrowers
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
