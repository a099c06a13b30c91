"""The dataset use cases the API and the portal call (``services.datasets`` owns the rules),
each in its own unit of work. None wakes the controller: a dataset changes what the next
launch fetches, never what the scheduler decides."""

from __future__ import annotations

from trainyard.schemas.datasets import DatasetView, NodeCacheView, RegisterDatasetRequest
from trainyard.services import datasets
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


def remove_dataset(server: Server, user: UserRow, name: str) -> None:
    with server.db.session() as session:
        datasets.remove_dataset(session, user, name)


def grant_dataset(server: Server, user: UserRow, name: str, grantee: str) -> DatasetView:
    with server.db.session() as session:
        datasets.grant_dataset(session, user, name, grantee)
    return dataset_views(server, user, name)[0]


def revoke_dataset_grant(server: Server, user: UserRow, name: str, grantee: str) -> DatasetView:
    with server.db.session() as session:
        datasets.revoke_dataset_grant(session, user, name, grantee)
    return dataset_views(server, user, name)[0]


def cache_views(server: Server, viewer: UserRow) -> list[NodeCacheView]:
    """Each node's dataset cache, read outside any transaction (it reads the nodes' files)."""
    caches = datasets.node_caches(server.backend)
    with server.db.session() as session:
        return datasets.cache_views(session, caches, viewer)
