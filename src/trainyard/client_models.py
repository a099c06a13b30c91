"""The API's models as the SDK reads its answers, each imported (and its validator built) at
the first answer that needs it: building every ``trainyard.schemas`` model up front cost a
`yard` command more than it spent talking to the server, and a command reads two or three
of them (issue 33). ``Model("admin.VcView")`` stands for ``VcView``; ``many=True`` for a list
of them."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Generic, TypeVar, Union

if TYPE_CHECKING:  # pydantic itself is imported with the first model: `yard jobs` reads none
    from pydantic import TypeAdapter

Reply = TypeVar("Reply")


class Model(Generic[Reply]):
    """A model of ``trainyard.schemas``, named ``"MODULE.NAME"``, read when first needed."""

    def __init__(self, where: str, *, many: bool = False) -> None:
        self.where, self.many = where, many
        self._adapter: TypeAdapter[Reply] | None = None

    def adapter(self) -> TypeAdapter[Reply]:
        if self._adapter is None:
            from pydantic import TypeAdapter

            module, _, name = self.where.rpartition(".")
            model: Any = getattr(importlib.import_module(f"trainyard.schemas.{module}"), name)
            self._adapter = TypeAdapter(list[model] if self.many else model)
        return self._adapter

    def __repr__(self) -> str:
        return f"Model({self.where!r}{', many=True' if self.many else ''})"


# What `Client._parse` reads an answer as (a string: TypeAdapter is not imported at run time).
Shape = Union[type[Reply], "TypeAdapter[Reply]", Model[Reply]]  # noqa: UP007


def adapter_for(shape: Shape[Reply]) -> TypeAdapter[Reply]:
    if isinstance(shape, Model):
        return shape.adapter()
    from pydantic import TypeAdapter

    return shape if isinstance(shape, TypeAdapter) else TypeAdapter(shape)


# The models `Client`'s calls answer with (client.py).
if TYPE_CHECKING:  # for the names below, which stand for these
    from trainyard.schemas.admin import GroupView, RemovalResult, UserQuotaView, VcView
    from trainyard.schemas.alerts import AlertRuleView, AlertView
    from trainyard.schemas.cluster import NodeView, TopView
    from trainyard.schemas.environments import EnvironmentView
    from trainyard.schemas.history import JobMetrics, NodeMetrics
    from trainyard.schemas.images import ImagePullView, ImageRemovalView, NodeImageView
    from trainyard.schemas.jobs import DryRunResult, JobDetail, JobPage, SubmitResult
    from trainyard.schemas.storages import StorageView
    from trainyard.schemas.usage import UsageReport
    from trainyard.schemas.users import TokenResponse, TokenView, UserView

JOB: Model[JobDetail] = Model("jobs.JobDetail")
JOB_PAGE: Model[JobPage] = Model("jobs.JobPage")
SUBMITTED: Model[SubmitResult] = Model("jobs.SubmitResult")
DRY_RUN: Model[DryRunResult] = Model("jobs.DryRunResult")
NODE: Model[NodeView] = Model("cluster.NodeView")
NODES: Model[list[NodeView]] = Model("cluster.NodeView", many=True)
TOP: Model[TopView] = Model("cluster.TopView")
IMAGES: Model[list[NodeImageView]] = Model("images.NodeImageView", many=True)
PULLS: Model[list[ImagePullView]] = Model("images.ImagePullView", many=True)
REMOVALS: Model[list[ImageRemovalView]] = Model("images.ImageRemovalView", many=True)
USER: Model[UserView] = Model("users.UserView")
USERS: Model[list[UserView]] = Model("users.UserView", many=True)
TOKEN: Model[TokenView] = Model("users.TokenView")
TOKENS: Model[list[TokenView]] = Model("users.TokenView", many=True)
TOKEN_RESPONSE: Model[TokenResponse] = Model("users.TokenResponse")
VC: Model[VcView] = Model("admin.VcView")
VCS: Model[list[VcView]] = Model("admin.VcView", many=True)
GROUP: Model[GroupView] = Model("admin.GroupView")
GROUPS: Model[list[GroupView]] = Model("admin.GroupView", many=True)
QUOTAS: Model[list[UserQuotaView]] = Model("admin.UserQuotaView", many=True)
REMOVAL: Model[RemovalResult] = Model("admin.RemovalResult")
STORAGE: Model[StorageView] = Model("storages.StorageView")
STORAGES: Model[list[StorageView]] = Model("storages.StorageView", many=True)
ALERTS: Model[list[AlertView]] = Model("alerts.AlertView", many=True)
ALERT_RULE: Model[AlertRuleView] = Model("alerts.AlertRuleView")
ALERT_RULES: Model[list[AlertRuleView]] = Model("alerts.AlertRuleView", many=True)
ENVIRONMENT: Model[EnvironmentView] = Model("environments.EnvironmentView")
ENVIRONMENTS: Model[list[EnvironmentView]] = Model("environments.EnvironmentView", many=True)
JOB_METRICS: Model[JobMetrics] = Model("history.JobMetrics")
NODE_METRICS: Model[NodeMetrics] = Model("history.NodeMetrics")
USAGE: Model[UsageReport] = Model("usage.UsageReport")
