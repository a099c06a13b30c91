"""The image cache (OpenPAI's): which node holds which container image; admins pre-pull
and evict."""

from __future__ import annotations

from sqlalchemy.orm import Session

from trainyard.backends.base import Backend, ImageCache
from trainyard.backends.containers import ContainerError
from trainyard.schemas.images import ImagePullView, ImageRemovalView, NodeImageView
from trainyard.services.errors import Conflict, Invalid, ServiceError
from trainyard.services.specs import StoredSpecs
from trainyard.spec.checks import qualified_image
from trainyard.spec.errors import SpecError
from trainyard.store.db import Database
from trainyard.store.queries import environments as env_queries
from trainyard.store.queries import jobs as job_queries


class NoImageCache(ServiceError):
    """The backend cannot say which node holds which image (it has no ImageCache)."""

    status = 409


def _cache(backend: Backend) -> ImageCache:
    if not isinstance(backend, ImageCache):
        raise NoImageCache(f"the {backend.name} backend keeps no image cache")
    return backend


def node_images(backend: Backend) -> list[NodeImageView]:
    """Every image on every node, by node then image."""
    try:
        images = _cache(backend).node_images()
    except ContainerError as exc:  # the engine failed: nothing the caller did
        raise NoImageCache(str(exc)) from exc
    return [NodeImageView(node=i.node, image=i.image, id=i.id, sizeBytes=i.size_bytes, createdAt=i.created_at,
                          pulledAt=i.pulled_at) for i in sorted(images, key=lambda i: (i.node, i.image))]


def pull_image(backend: Backend, image: str, node: str | None) -> list[ImagePullView]:
    """Pull ``image`` to ``node`` (None: every node) unless it is there (admin; the caller checks)."""
    _check_node(backend, node)
    image = qualified_image(image)  # as a job's task pulls it: Docker's reading of a short name
    try:
        pulls = _cache(backend).pull_image(image, node)
    except ContainerError as exc:
        raise Invalid(str(exc)) from exc
    return [ImagePullView(node=p.node, image=p.image, pulled=p.pulled, seconds=round(p.seconds, 1), error=p.error,
                          message=p.note) for p in pulls]


def remove_image(db: Database, specs: StoredSpecs, backend: Backend, image: str,
                 node: str | None) -> list[ImageRemovalView]:
    """Remove ``image`` from ``node`` (None: every node) where it is (admin; the caller
    checks). Conflict while a task of a job that has not ended runs in it there (or is
    placed to); the engine itself keeps an image any other container uses (that node's
    answer says so)."""
    _check_node(backend, node)
    image = qualified_image(image)
    with db.session() as session:
        users = tasks_using(session, specs, image, node)
    if users:
        raise Conflict(f"{image} is in use by {', '.join(users[:5])}{' and more' if len(users) > 5 else ''}; "
                       "evict it once they have ended")
    try:
        removals = _cache(backend).remove_image(image, node)
    except ContainerError as exc:
        raise Invalid(str(exc)) from exc
    return [ImageRemovalView(node=r.node, image=r.image, removed=r.removed, inUse=r.in_use, error=r.error,
                             message=r.note) for r in removals]


def tasks_using(session: Session, specs: StoredSpecs, image: str, node: str | None) -> list[str]:
    """``job J task ROLE/INDEX on node N`` for each task placed or running (on ``node``) in ``image``."""
    found = []
    for task, job in job_queries.live_tasks_with_jobs(session, node):
        try:
            spec = specs.of(job)
        except SpecError:
            continue
        used = spec.role_image(task.role)
        if used is None and (named := spec.environment_of(task.role)) is not None:
            row = env_queries.environments_named(session, [named]).get(named)
            used = None if row is None or row.image is None else qualified_image(row.image)
        if used == qualified_image(image):
            found.append(f"job {job.id} task {task.role}/{task.index} on node {task.node}")
    return found


def _check_node(backend: Backend, node: str | None) -> None:
    if node is not None and node not in {n.name for n in backend.inventory()}:
        raise Invalid(f"no node named {node!r}", details=[{"path": "node", "message": f"no node named {node!r}"}])
