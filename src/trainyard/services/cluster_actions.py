"""What the cluster is made of and who may use which part — virtual clusters and their
grants, groups and their members, per-user quotas, cordons and node labels, storages and
their grants, environments, the alert rules — each change composed once for the API
(``api/routers/admin.py``, ``storages.py``, ``environments.py``, ``alerts.py``) and the portal
(the VCs, users, cluster, storages and environments pages), with the reads both show: these,
the live nodes and their history, alerts and usage.

Each opens its own unit of work through the services that own the rules (``admin.py``,
``removal.py``, ``storages.py``, ``environments.py``) and, once it has committed, wakes the
controller when the change is one its next cycle acts on: a quota, a VC's sharing rule or
borrowing settings, a member, a cordon or a label, and every removal (which may have stopped jobs)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import NamedTuple

from trainyard.backends.base import EnvironmentStore
from trainyard.schemas.admin import KEEP, GroupView, Keep, RemovalResult, UserQuotaView, VcView
from trainyard.schemas.alerts import AlertRuleUpdate, AlertRuleView, AlertView
from trainyard.schemas.cluster import NodeView, TopView
from trainyard.schemas.environments import CreateEnvironmentRequest, EnvironmentView
from trainyard.schemas.history import NodeMetrics
from trainyard.schemas.storages import StorageView
from trainyard.schemas.usage import UsageGrouping, UsageReport
from trainyard.services import admin, environments, history, live, removal, storages
from trainyard.services import alerts as alert_service
from trainyard.services import jobs as job_service
from trainyard.services import usage as usage_service
from trainyard.services.server import Server
from trainyard.services.views import group_view, node_view, user_quota_view
from trainyard.store.queries import nodes as node_queries
from trainyard.store.queries import vcs as vc_queries
from trainyard.store.rows import UserRow

# -- virtual clusters and their grants ----------------------------------------------------


def _taking_away(server: Server, remove: Callable[..., RemovalResult], *names: str, force: bool,
                 by: UserRow) -> RemovalResult:
    """One of ``removal.py``'s, in its own unit of work; then the controller is woken, since
    a forced removal stops jobs."""
    with server.db.session() as session:
        result = remove(session, *names, force=force, by=by, clock=server.clock)
    server.wake_controller()
    return result


def vcs(server: Server, viewer: UserRow | None = None) -> list[VcView]:
    """Every VC with quota, use and queue; a ``viewer`` who is not an admin sees only those
    they may use (``admin.describe_vcs``)."""
    with server.db.session() as session:
        return admin.describe_vcs(session, viewer)


def gpu_models(server: Server) -> list[str]:
    """The cluster's GPU models, by name: what a VC's quota may be given per."""
    with server.db.session() as session:
        return sorted(node_queries.gpus_by_model(session))


def vc(server: Server, name: str) -> VcView:
    """One VC as an admin sees it (after a change: the answer to it)."""
    return next(v for v in vcs(server) if v.name == name)


def create_vc(server: Server, name: str, *, gpus: int, model: str | None, preemption: bool,
              gpu_sharing: str, borrow_limit: int | None = None, lend_limit: int | None = None,
              weight: float = 1.0) -> None:
    with server.db.session() as session:
        admin.create_vc(session, name, gpus=gpus, model=model, preemption=preemption, clock=server.clock,
                        gpu_sharing=gpu_sharing, borrow_limit=borrow_limit, lend_limit=lend_limit, weight=weight)
    server.wake_controller()


def set_vc_quota(server: Server, name: str, *, gpus: int, model: str | None) -> None:
    with server.db.session() as session:
        admin.set_vc_quota(session, name, gpus=gpus, model=model)
    server.wake_controller()


def set_vc_sharing(server: Server, name: str, gpu_sharing: str) -> None:
    with server.db.session() as session:
        admin.set_vc_sharing(session, name, gpu_sharing)
    server.wake_controller()


def set_vc_borrowing(server: Server, name: str, *, borrow_limit: int | None | Keep = KEEP,
                     lend_limit: int | None | Keep = KEEP, weight: float | Keep = KEEP) -> None:
    """A VC's (``default``'s too) borrowing and lending limits and weight; ``KEEP`` leaves one as it is."""
    with server.db.session() as session:
        admin.set_vc_borrowing(session, name, borrow_limit=borrow_limit, lend_limit=lend_limit, weight=weight)
    server.wake_controller()


def grant_vc(server: Server, name: str, grantee: str) -> None:
    """Let a user, or every member of ``@group``, submit to the VC (no job waits on it: a
    submit without the grant is refused)."""
    with server.db.session() as session:
        admin.grant_vc(session, name, grantee)


def revoke_grant(server: Server, by: UserRow, name: str, grantee: str, *, force: bool) -> RemovalResult:
    return _taking_away(server, removal.revoke_grant, name, grantee, force=force, by=by)


def delete_vc(server: Server, by: UserRow, name: str, *, force: bool) -> RemovalResult:
    return _taking_away(server, removal.delete_vc, name, force=force, by=by)


# -- groups and per-user quotas -----------------------------------------------------------


def groups(server: Server) -> list[GroupView]:
    with server.db.session() as session:
        return [group_view(g, m) for g, m in admin.list_groups(session)]


def groups_of(server: Server, viewer: UserRow) -> list[str]:
    """The names of ``viewer``'s groups (an admin: every group), by name."""
    with server.db.session() as session:
        mine = vc_queries.group_ids_of(session, viewer.id)
        return [g.name for g, _ in admin.list_groups(session) if viewer.is_admin or g.id in mine]


def create_group(server: Server, name: str) -> GroupView:
    with server.db.session() as session:
        return group_view(admin.create_group(session, name, clock=server.clock), [])


def add_member(server: Server, group: str, user: str) -> None:
    with server.db.session() as session:
        admin.add_member(session, group, user)
    server.wake_controller()


def remove_member(server: Server, by: UserRow, group: str, user: str, *, force: bool) -> RemovalResult:
    return _taking_away(server, removal.remove_member, group, user, force=force, by=by)


def user_quotas(server: Server) -> list[UserQuotaView]:
    with server.db.session() as session:
        return [user_quota_view(u, p, m) for u, p, m in admin.list_user_quotas(session)]


def set_user_quota(server: Server, user: str, *, priority: str, gpus: float | None) -> None:
    with server.db.session() as session:
        admin.set_user_quota(session, user, priority=priority, gpus=gpus)
    server.wake_controller()


# -- nodes --------------------------------------------------------------------------------


class NodesPage(NamedTuple):
    nodes: list[NodeView]
    number: int  # from 1
    pages: int
    first: int  # the first node's position, from 0
    total: int


def nodes(server: Server, viewer: UserRow, *, now: datetime | None = None) -> list[NodeView]:
    """Every node with its allocation and newest fresh sample as of ``now`` (default: the
    clock's), as ``live.live_nodes`` shows them to ``viewer``."""
    with server.db.session() as session:
        return live.live_nodes(session, viewer, server.clock.now() if now is None else now,
                               server.monitor_interval_seconds)


def node_page(server: Server, viewer: UserRow, number: int, per_page: int) -> NodesPage:
    """Page ``number`` (from 1) of the nodes by name, ``per_page`` to a page, as ``nodes``
    shows them; past the end (nodes went away), the last page."""
    interval = server.monitor_interval_seconds
    with server.db.session() as session:
        first = (number - 1) * per_page
        shown, total = live.node_page(session, viewer, server.clock.now(), interval, first=first, count=per_page)
        pages = max(1, -(-total // per_page))
        if number > pages:
            first = (pages - 1) * per_page
            shown, total = live.node_page(session, viewer, server.clock.now(), interval, first=first, count=per_page)
            number = pages
    return NodesPage(shown, number, pages, first, total)


def node_metrics(server: Server, name: str, *, since: str | None, until: str | None) -> NodeMetrics:
    """A node's own figures over ``since``..``until`` (``history.window``)."""
    now = server.clock.now()
    span = history.window(since, until, now)
    with server.db.session() as session:
        return history.node_metrics(session, name, span, retention=server.monitor_retention, now=now)


def top(server: Server, viewer: UserRow) -> TopView:
    """``yard top``'s view: the nodes, and the running jobs ``viewer`` may see (``live.top``)."""
    with server.db.session() as session:
        return live.top(session, viewer, server.clock.now(), server.monitor_interval_seconds)


def set_cordon(server: Server, name: str, cordoned: bool) -> NodeView:
    """Cordon (or uncordon) a node: no new task is placed on it; what runs there goes on."""
    with server.db.session() as session:
        node = admin.set_cordon(session, name, cordoned)
        view = node_view(node, job_service.active_tasks(session))
    server.wake_controller()
    return view


def change_labels(server: Server, name: str, changes: Mapping[str, str | None]) -> NodeView:
    with server.db.session() as session:
        node = admin.change_labels(session, name, changes)
        view = node_view(node, job_service.active_tasks(session))
    server.wake_controller()
    return view


# -- storages -----------------------------------------------------------------------------


def storage_views(server: Server, viewer: UserRow, name: str | None = None) -> list[StorageView]:
    """The storages ``viewer`` may see (``name``: that one, or NotFound)."""
    with server.db.session() as session:
        return storages.storage_views(session, viewer, name)


def create_storage(server: Server, name: str, path: str, *, read_only: bool, kind: str, description: str) -> None:
    with server.db.session() as session:
        storages.create_storage(session, name, path, read_only=read_only, kind=kind, description=description,
                                clock=server.clock)


def grant_storage(server: Server, name: str, grantee: str, *, read_only: bool) -> None:
    with server.db.session() as session:
        storages.grant_storage(session, name, grantee, read_only=read_only)


def revoke_storage_grant(server: Server, by: UserRow, name: str, grantee: str, *, force: bool) -> RemovalResult:
    return _taking_away(server, removal.revoke_storage_grant, name, grantee, force=force, by=by)


def delete_storage(server: Server, by: UserRow, name: str, *, force: bool) -> RemovalResult:
    return _taking_away(server, removal.delete_storage, name, force=force, by=by)


# -- environments -------------------------------------------------------------------------


def environment_views(server: Server, viewer: UserRow) -> list[EnvironmentView]:
    with server.db.session() as session:
        return environments.list_environments(session, viewer)


def environment_view(server: Server, viewer: UserRow, name: str) -> EnvironmentView:
    with server.db.session() as session:
        return environments.describe_environment(session, viewer, name)


def create_environment(server: Server, user: UserRow, wanted: CreateEnvironmentRequest) -> EnvironmentView:
    """A base environment (admins), READY at once, or a custom one built by a job of
    ``user``'s into the backend's environments root (``environments.create_environment``)."""
    root = server.backend.environments_root if isinstance(server.backend, EnvironmentStore) else None
    nodes = server.node_states()
    with server.db.session() as session:
        view = environments.create_environment(session, user, wanted, root=root, clock=server.clock, nodes=nodes)
    server.wake_controller()
    return view


def delete_environment(server: Server, user: UserRow, name: str, *, force: bool) -> environments.Deleted:
    """Delete an environment (``environments.delete_environment``); a custom one's folder
    goes once the deletion has committed."""
    with server.db.session() as session:
        deleted = environments.delete_environment(session, user, name, force=force, clock=server.clock)
    server.wake_controller()
    if deleted.files is not None:
        environments.remove_files(name, deleted.files)
    return deleted


# -- alerts and usage ---------------------------------------------------------------------


def alerts(server: Server, viewer: UserRow, *, include_resolved: bool = False) -> list[AlertView]:
    """Alerts, newest first: an admin sees all; a user those about their own jobs."""
    with server.db.session() as session:
        return alert_service.list_alerts(session, viewer, include_resolved=include_resolved)


def alert_rules(server: Server) -> list[AlertRuleView]:
    with server.db.session() as session:
        return alert_service.rule_views(session, server.monitor_interval_seconds)


def prometheus_rules(server: Server) -> str:
    """The enabled rules with their current thresholds as a Prometheus alerting-rules file."""
    with server.db.session() as session:
        return alert_service.prometheus_rules_file(session, server.monitor_interval_seconds)


def set_alert_rule(server: Server, name: str, change: AlertRuleUpdate) -> AlertRuleView:
    """Change a rule (admins); the controller's next evaluation reads it (no wake: the rules
    are evaluated on the monitoring tick)."""
    with server.db.session() as session:
        return alert_service.set_rule(session, name, change, server.clock, server.monitor_interval_seconds)


def usage(server: Server, caller: UserRow, *, by: UsageGrouping, since: datetime | None, until: datetime | None,
          user: str | None = None, vc: str | None = None, group: str | None = None, job_id: int | None = None,
          now: datetime | None = None) -> UsageReport:
    """Resources allocated and used over ``[since, until)`` (``usage.period_of``'s defaults,
    as of ``now``: default the clock's), grouped ``by``; a non-admin sees only their own jobs."""
    period = usage_service.period_of(since, until, server.clock.now() if now is None else now)
    with server.db.session() as session:
        return usage_service.usage_report(session, caller, by=by, period=period,
                                          monitor_interval_seconds=server.monitor_interval_seconds, user=user,
                                          vc=vc, group=group, job_id=job_id,
                                          fair_share_half_life=server.fair_share_half_life_seconds)
