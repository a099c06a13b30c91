"""Admin operations: groups, virtual clusters and their grants, per-user quotas, cordons.

Every change here takes effect on the controller's next cycle; nothing is restarted and
no running work is touched (reclaiming a VC's share is the scheduler's decision).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple, TypeVar

from sqlalchemy.orm import Session

from trainyard.core import labels
from trainyard.core.clock import Clock
from trainyard.core.names import ANY_MODEL, DEFAULT_VC, GROUP_OR_VC_NAME
from trainyard.core.priorities import PRIORITY_NAMES, Priority
from trainyard.core.sharing import DEFAULT_GPU_SHARING, GPU_SHARING_NAMES, GpuSharing
from trainyard.schemas.admin import KEEP, MAX_GPU_LIMIT, MAX_WEIGHT, MIN_WEIGHT, Keep, VcView
from trainyard.services.auth import get_user
from trainyard.services.errors import Conflict, Invalid, NotFound
from trainyard.store import meta
from trainyard.store.queries import nodes as node_queries
from trainyard.store.queries import users as user_queries
from trainyard.store.queries import vcs as vc_queries
from trainyard.store.queries.vcs import HeldShares
from trainyard.store.rows import (
    GroupRow,
    MembershipRow,
    NodeRow,
    UserQuotaRow,
    UserRow,
    VcGrantRow,
    VcQuotaRow,
    VirtualClusterRow,
)


def _check_name(kind: str, name: str) -> None:
    if not GROUP_OR_VC_NAME.fullmatch(name):
        raise Invalid(
            f"{kind} name {name!r} is not valid: lowercase letters, digits, '_' and '-', "
            "starting with a letter, at most 64 characters",
            details=[{"path": "name", "message": f"invalid {kind} name"}],
        )


# -- groups -------------------------------------------------------------------------------


def create_group(session: Session, name: str, *, clock: Clock) -> GroupRow:
    _check_name("group", name)
    if vc_queries.group_named(session, name) is not None:
        raise Conflict(f"group {name!r} already exists")
    group = GroupRow(name=name, created_at=clock.now())
    session.add(group)
    session.flush()
    return group


def get_group(session: Session, name: str) -> GroupRow:
    group = vc_queries.group_named(session, name)
    if group is None:
        raise NotFound(f"no group named {name!r}")
    return group


def add_member(session: Session, group_name: str, user_name: str) -> None:
    group, user = get_group(session, group_name), get_user(session, user_name)
    if vc_queries.membership(session, group.id, user.id) is None:
        session.add(MembershipRow(group_id=group.id, user_id=user.id))


def list_groups(session: Session) -> list[tuple[GroupRow, list[str]]]:
    groups = vc_queries.all_groups(session)
    members = vc_queries.member_names(session)
    return [(g, sorted(name for gid, name in members if gid == g.id)) for g in groups]


# -- virtual clusters ---------------------------------------------------------------------


def create_vc(
    session: Session, name: str, *, gpus: int, model: str | None, preemption: bool, clock: Clock,
    gpu_sharing: str = DEFAULT_GPU_SHARING.value,
    borrow_limit: int | None = None, lend_limit: int | None = None, weight: float = 1.0,
) -> VirtualClusterRow:
    _check_name("virtual cluster", name)
    sharing = _gpu_sharing(gpu_sharing)
    borrowing = Borrowing(_gpu_limit("borrowLimit", borrow_limit), _gpu_limit("lendLimit", lend_limit),
                          _weight(weight))
    if name == DEFAULT_VC:
        raise Conflict("'default' is built in: it holds whatever no other VC guarantees")
    if vc_queries.vc_named(session, name) is not None:
        raise Conflict(f"virtual cluster {name!r} already exists")
    vc = VirtualClusterRow(
        name=name, allow_priority_preemption=preemption, gpu_sharing=sharing.value, created_at=clock.now(),
        borrow_limit=borrowing.borrow_limit, lend_limit=borrowing.lend_limit, weight=borrowing.weight,
    )
    session.add(vc)
    session.flush()
    set_vc_quota(session, name, gpus=gpus, model=model)
    return vc


def get_vc(session: Session, name: str) -> VirtualClusterRow:
    vc = vc_queries.vc_named(session, name)
    if vc is None:
        raise NotFound(f"no virtual cluster named {name!r}; see `yard vc list`")
    return vc


def _gpu_sharing(value: str) -> GpuSharing:
    if value not in GPU_SHARING_NAMES:
        raise Invalid(
            f"unknown GPU sharing rule {value!r}; use one of {', '.join(GPU_SHARING_NAMES)}",
            details=[{"path": "gpuSharing", "message": "unknown GPU sharing rule"}],
        )
    return GpuSharing(value)


def set_vc_sharing(session: Session, name: str, gpu_sharing: str) -> None:
    """Set whose fractional GPU shares the VC's jobs may share a device with. Jobs already
    sharing a device keep running; new placements follow the rule from the next cycle."""
    sharing = _gpu_sharing(gpu_sharing)
    if name == DEFAULT_VC:
        raise Conflict(
            "'default' is built in and always shares GPUs with the same user only; "
            "put users who may share into a VC of their own"
        )
    get_vc(session, name).gpu_sharing = sharing.value


class Borrowing(NamedTuple):
    """A VC's borrowing settings, as ``scheduler.snapshot.VirtualCluster`` takes them."""

    borrow_limit: int | None = None  # whole GPUs of each model beyond its quota (None: no limit)
    lend_limit: int | None = None  # whole GPUs of each model of its unused quota (None: all)
    weight: float = 1.0  # its share of idle GPUs against other borrowers


_Number = TypeVar("_Number", int, float)

# ``default`` has no row: its settings are kept in the ``meta`` table under these keys.
_DEFAULT_VC_KEY = "vc." + DEFAULT_VC + ".{}"


def _gpu_limit(path: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_GPU_LIMIT:
        raise Invalid(f"{path} must be a whole number of GPUs ≥ 0, or none for no limit; got {value!r}",
                      details=[{"path": path, "message": "a whole number of GPUs ≥ 0, or null for no limit"}])
    return value


def _weight(value: object) -> float:
    if (isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
            or not MIN_WEIGHT <= value <= MAX_WEIGHT):
        raise Invalid(f"weight must be a number from {MIN_WEIGHT:g} to {MAX_WEIGHT:g}; got {value!r}",
                      details=[{"path": "weight", "message": f"a number from {MIN_WEIGHT:g} to {MAX_WEIGHT:g}"}])
    return float(value)


def set_vc_borrowing(
    session: Session, name: str, *, borrow_limit: int | None | Keep = KEEP, lend_limit: int | None | Keep = KEEP,
    weight: float | Keep = KEEP,
) -> None:
    """Set how much the VC may borrow beyond its quota and lend of its unused quota (whole
    GPUs of each model; None: no limit) and its weight among borrowers; ``KEEP`` leaves one as
    it is. ``default`` (no row) keeps its own in the ``meta`` table. Borrowed work already
    running is not stopped for a lower limit: the scheduler reclaims what the rules say."""
    changes: dict[str, int | float | None] = {}
    if not isinstance(borrow_limit, Keep):
        changes["borrow_limit"] = _gpu_limit("borrowLimit", borrow_limit)
    if not isinstance(lend_limit, Keep):
        changes["lend_limit"] = _gpu_limit("lendLimit", lend_limit)
    if not isinstance(weight, Keep):
        changes["weight"] = _weight(weight)
    if name == DEFAULT_VC:
        for field, value in changes.items():
            meta.set_value(session, _DEFAULT_VC_KEY.format(field), None if value is None else repr(value))
        return
    vc = get_vc(session, name)
    for field, value in changes.items():
        setattr(vc, field, value)


def _stored_number(session: Session, field: str, parse: Callable[[str], _Number]) -> _Number | None:
    """One of ``default``'s settings from ``meta``; None while unset (or not a number)."""
    text = meta.value(session, _DEFAULT_VC_KEY.format(field))
    try:
        return None if text is None else parse(text)
    except ValueError:  # not written by set_vc_borrowing: as if unset
        return None


def _default_borrowing(session: Session) -> Borrowing:
    weight = _stored_number(session, "weight", float)
    return Borrowing(_stored_number(session, "borrow_limit", int), _stored_number(session, "lend_limit", int),
                     1.0 if weight is None else weight)


def vc_borrowing(session: Session, rows: Sequence[VirtualClusterRow] | None = None) -> dict[str, Borrowing]:
    """VC name -> its borrowing settings, ``default``'s (from ``meta``) first; ``rows`` (every
    VC) are read from the store unless the caller has them already."""
    rows = vc_queries.all_vcs(session) if rows is None else rows
    settings = {DEFAULT_VC: _default_borrowing(session)}
    for row in rows:
        settings[row.name] = Borrowing(row.borrow_limit, row.lend_limit, row.weight)
    return settings


def set_vc_quota(session: Session, name: str, *, gpus: int, model: str | None) -> None:
    """Set one model's guaranteed GPUs (0 removes it); the sum must fit the cluster."""
    if gpus < 0:
        raise Invalid("gpus must be ≥ 0", details=[{"path": "gpus", "message": "must be ≥ 0"}])
    vc = get_vc(session, name)
    model = model or ANY_MODEL
    models = sorted(node_queries.gpus_by_model(session))
    if model == ANY_MODEL and gpus > 0 and len(models) > 1:
        raise Invalid(
            f"this cluster has several GPU models ({', '.join(models)}): give the quota per model, "
            f"e.g. `yard vc quota {name} --gpus {gpus} --model {models[0]}`",
            details=[{"path": "model", "message": "required on a cluster with several GPU models"}],
        )
    row = vc_queries.vc_quota(session, vc.id, model)
    if gpus == 0:
        if row is not None:
            session.delete(row)
        return
    if row is None:
        session.add(VcQuotaRow(vc_id=vc.id, gpu_model=model, gpus=gpus))
    else:
        row.gpus = gpus
    session.flush()
    _check_quotas_fit(session)


def _check_quotas_fit(session: Session) -> None:
    capacity = node_queries.gpus_by_model(session)
    total = sum(capacity.values())
    promised: dict[str, int] = {}
    for row in vc_queries.all_vc_quotas(session):
        promised[row.gpu_model] = promised.get(row.gpu_model, 0) + row.gpus
    for model, gpus in promised.items():
        have = total if model == ANY_MODEL else capacity.get(model, 0)
        if gpus > have:
            what = "GPUs" if model == ANY_MODEL else f"{model} GPUs"
            raise Invalid(
                f"virtual clusters would guarantee {gpus} {what}; the cluster has {have}",
                details=[{"path": "gpus", "message": "over capacity"}],
            )
    if sum(promised.values()) > total:
        raise Invalid(f"virtual clusters would guarantee {sum(promised.values())} GPUs; the cluster has {total}",
                      details=[{"path": "gpus", "message": "over capacity"}])


def guaranteed_quotas(
    session: Session, capacity: dict[str, int] | None = None, rows: Sequence[VirtualClusterRow] | None = None
) -> dict[str, tuple[dict[str, int], bool]]:
    """VC name -> (GPUs guaranteed per model, priority preemption), as the scheduler sees them.

    ``default`` guarantees what no other VC does. A quota for any model (``*``) applies to
    the cluster's model; with several models it guarantees nothing (setting one is
    refused there). Empty when no VC is defined: then every job shares the cluster.
    ``capacity`` (GPUs per model) is read from the nodes, and ``rows`` (every VC) from the
    store, unless the caller has them already.
    """
    rows = vc_queries.all_vcs(session) if rows is None else rows
    if not rows:
        return {}
    capacity = node_queries.gpus_by_model(session) if capacity is None else capacity
    only_model = next(iter(capacity)) if len(capacity) == 1 else None
    promised: dict[str, int] = {}
    quotas: dict[str, tuple[dict[str, int], bool]] = {}
    for row in rows:
        quota: dict[str, int] = {}
        for q in row.quotas:
            model = only_model if q.gpu_model == ANY_MODEL else q.gpu_model
            if model is not None:
                quota[model] = quota.get(model, 0) + q.gpus
                promised[model] = promised.get(model, 0) + q.gpus
        quotas[row.name] = (quota, row.allow_priority_preemption)
    rest = {
        model: count - promised.get(model, 0) for model, count in capacity.items() if count > promised.get(model, 0)
    }
    return {DEFAULT_VC: (rest, True), **quotas}


def grant_vc(session: Session, name: str, grantee: str) -> None:
    """Let a user, or every member of ``@group``, submit to the VC."""
    vc = get_vc(session, name)
    if grantee.startswith("@"):
        group = get_group(session, grantee[1:])
        exists = any(g.group_id == group.id for g in vc.grants)
        if not exists:
            vc.grants.append(VcGrantRow(group_id=group.id))
    else:
        user = get_user(session, grantee)
        if not any(g.user_id == user.id for g in vc.grants):
            vc.grants.append(VcGrantRow(user_id=user.id))


def may_use_vc(session: Session, user: UserRow, name: str) -> bool:
    if name == DEFAULT_VC:
        return True
    vc = vc_queries.vc_named(session, name)
    if vc is None:
        return False  # for admins too: a misspelt VC would otherwise take a job no queue serves
    if user.is_admin:
        return True
    groups = vc_queries.group_ids_of(session, user.id)
    return any(g.user_id == user.id or (g.group_id is not None and g.group_id in groups) for g in vc.grants)


def list_vcs(session: Session) -> list[VirtualClusterRow]:
    return vc_queries.all_vcs(session)


def vc_usage(session: Session, held: Sequence[HeldShares] | None = None) -> dict[str, dict[str, float]]:
    """Per VC: GPUs used by guaranteed work within its quota, GPUs its guaranteed jobs hold
    beyond it (attempts running borrowed: what its borrowing limit counts), GPUs its
    opportunistic jobs hold, jobs waiting. ``held`` (``vc_queries.held_gpu_shares``) is read
    unless the caller has it already."""
    usage: dict[str, dict[str, float]] = {}

    def entry(vc: str) -> dict[str, float]:
        return usage.setdefault(vc, {"used": 0.0, "borrowed": 0.0, "opportunistic": 0.0, "waiting": 0})

    for _, vc, priority, gpus, borrowed in vc_queries.held_gpu_shares(session) if held is None else held:
        milli = sum(share[1] for share in gpus)
        kind = "opportunistic" if Priority(priority).is_opportunistic else "borrowed" if borrowed else "used"
        entry(vc)[kind] += milli / 1000
    for vc, count in vc_queries.waiting_jobs_by_vc(session).items():
        entry(vc)["waiting"] = count
    return usage


def describe_vcs(
    session: Session, viewer: UserRow | None = None, *,
    held: Sequence[HeldShares] | None = None, capacity: dict[str, int] | None = None,
) -> list[VcView]:
    """Every VC with quota, use and queue; ``default`` (first) holds what no VC guarantees.

    A ``viewer`` who is not an admin sees only the VCs they may use, and of who may use
    them only themselves and their own groups: other users' names are not theirs to list.
    ``held`` and ``capacity`` are as ``vc_usage`` and ``guaranteed_quotas`` take them, for a
    caller (``GET /metrics``) that has read them for its own use already.
    """
    usage = vc_usage(session, held)
    users = {u.id: u.name for u in user_queries.all_users(session)}
    groups = {g.id: g.name for g in vc_queries.all_groups(session)}
    every_vc = list_vcs(session)
    rest = guaranteed_quotas(session, capacity, every_vc).get(DEFAULT_VC, ({}, True))[0]
    borrowing = vc_borrowing(session, every_vc)
    rows: list[tuple[str, dict[str, int], bool, GpuSharing, list[str], list[str]]] = [
        (DEFAULT_VC, rest, True, DEFAULT_GPU_SHARING, ["everyone"], [])
    ]
    restricted = viewer is not None and not viewer.is_admin
    if restricted:
        assert viewer is not None
        mine = vc_queries.group_ids_of(session, viewer.id)
        users = {viewer.id: viewer.name}
        groups = {gid: name for gid, name in groups.items() if gid in mine}
    for vc in every_vc:
        if restricted and not any(g.user_id in users or g.group_id in groups for g in vc.grants):
            continue
        rows.append((
            vc.name, {q.gpu_model: q.gpus for q in vc.quotas}, vc.allow_priority_preemption,
            GpuSharing(vc.gpu_sharing),
            sorted(users[g.user_id] for g in vc.grants if g.user_id in users),
            sorted(groups[g.group_id] for g in vc.grants if g.group_id in groups),
        ))
    views = []
    for name, quota, preemption, sharing, granted_users, granted_groups in rows:
        use, settings = usage.get(name, {}), borrowing.get(name, Borrowing())
        views.append(VcView(
            name=name, quota=quota, used=use.get("used", 0), borrowed=use.get("borrowed", 0),
            opportunistic=use.get("opportunistic", 0), waiting=int(use.get("waiting", 0)),
            priorityPreemption=preemption, gpuSharing=sharing,
            users=granted_users, groups=granted_groups, borrowLimit=settings.borrow_limit,
            lendLimit=settings.lend_limit, weight=settings.weight,
        ))
    return views


# -- per-user quotas and nodes ------------------------------------------------------------


def set_user_quota(session: Session, user_name: str, *, priority: str, gpus: float | None) -> None:
    """At most ``gpus`` GPUs for the user at ``priority``; ``None`` removes the limit."""
    if priority not in PRIORITY_NAMES:
        raise Invalid(f"unknown priority {priority!r}; use one of {', '.join(PRIORITY_NAMES)}",
                      details=[{"path": "priority", "message": "unknown priority"}])
    user = get_user(session, user_name)
    row = user_queries.user_quota(session, user.id, priority)
    if gpus is None:
        if row is not None:
            session.delete(row)
        return
    if gpus < 0:
        raise Invalid("gpus must be ≥ 0", details=[{"path": "gpus", "message": "must be ≥ 0"}])
    milli = round(gpus * 1000)
    if row is None:
        session.add(UserQuotaRow(user_id=user.id, priority=priority, gpu_milli=milli))
    else:
        row.gpu_milli = milli


def list_user_quotas(session: Session) -> list[tuple[str, str, int]]:
    return user_queries.user_quotas_by_name(session)


def change_labels(session: Session, node_name: str, changes: Mapping[str, str | None]) -> NodeRow:
    """Set (a value) or remove (None) admins' labels on a node, as ``kubectl label``: a
    removed label the backend reports stays hidden; the scheduler sees them next cycle."""
    problems = []
    for key, value in changes.items():
        problem = labels.key_problem(key) or (None if value is None else labels.value_problem(value))
        if problem is not None:
            problems.append((f"labels.{key}", problem))
    if problems:
        raise Invalid("; ".join(f"{path}: {message}" for path, message in problems),
                      details=[{"path": path, "message": message} for path, message in problems])
    node = node_queries.node_named(session, node_name)
    if node is None:
        raise NotFound(f"no node named {node_name!r}; see `yard nodes`")
    mine = dict(node.admin_labels or {})
    reported = node.labels or {}
    for key, value in changes.items():
        if value is not None:
            mine[key] = value
        elif key in reported:
            mine[key] = None  # hide the backend's
        else:
            mine.pop(key, None)
    if sum(v is not None for v in mine.values()) > labels.MAX_LABELS:
        raise Invalid(f"a node may have at most {labels.MAX_LABELS} labels set by admins",
                      details=[{"path": "labels", "message": f"at most {labels.MAX_LABELS} labels"}])
    node.admin_labels = mine  # a new dict: the JSON column sees the change
    return node


def set_cordon(session: Session, node_name: str, cordoned: bool) -> NodeRow:
    node = node_queries.node_named(session, node_name)
    if node is None:
        raise NotFound(f"no node named {node_name!r}; see `yard nodes`")
    node.cordoned = cordoned
    return node
