"""The dataset use cases the API and the portal call (``services.datasets`` owns the rules),
each in its own unit of work. Only a forced removal or revoke wakes the controller (it
stopped jobs): otherwise a dataset changes what the next launch fetches, never what the
scheduler decides."""

from __future__ import annotations

from trainyard.schemas.admin import RemovalResult
from trainyard.schemas.datasets import DatasetView, NodeCacheView, RegisterDatasetRequest
from trainyard.services import datasets, removal
from trainyard.services.server import Server
from trainyard.store.rows import UserRow


def dataset_views(server: Server, viewer: UserRow, name: str | None = None) -> list[DatasetView]:
    with server.db.session() as session:
        return datasets.dataset_views(session, viewer, name)


def register_dataset(server: Server, user: UserRow, name: str, body: RegisterDatasetRequest) -> DatasetView:
    with server.db.session() as session:
        datasets.register_dataset(session, user, name, source=body.source, version=body.version, sha256=body.sha256,
                                  description=body.description, clock=server.clock,
                                  allowed_hosts=server.dataset_allowed_hosts)
    return dataset_views(server, user, name)[0]


def remove_dataset(server: Server, user: UserRow, name: str, *, force: bool = False) -> RemovalResult:
    """Refused (409, naming them) while waiting or running jobs read it, unless ``force``."""
    with server.db.session() as session:
        result = removal.remove_dataset(session, name, force=force, by=user, clock=server.clock)
    if result.stoppedJobs:
        server.wake_controller()
    return result


def grant_dataset(server: Server, user: UserRow, name: str, grantee: str) -> DatasetView:
    with server.db.session() as session:
        datasets.grant_dataset(session, user, name, grantee)
    return dataset_views(server, user, name)[0]


def revoke_dataset_grant(server: Server, user: UserRow, name: str, grantee: str, *,
                         force: bool = False) -> DatasetView:
    """Refused (409, naming them) while it is what lets waiting or running jobs read it, unless ``force``."""
    with server.db.session() as session:
        result = removal.revoke_dataset_grant(session, name, grantee, force=force, by=user, clock=server.clock)
    if result.stoppedJobs:
        server.wake_controller()
    return dataset_views(server, user, name)[0]


def cache_views(server: Server, viewer: UserRow) -> list[NodeCacheView]:
    """Each node's dataset cache, read outside any transaction (it reads the nodes' files)."""
    caches = datasets.node_caches(server.backend)
    with server.db.session() as session:
        return datasets.cache_views(session, caches, viewer)
