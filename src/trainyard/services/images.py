"""The image cache (OpenPAI's): which node holds which container image; admins pre-pull."""

from __future__ import annotations

from trainyard.backends.base import Backend, ImageCache
from trainyard.backends.containers import ContainerError
from trainyard.schemas.images import ImagePullView, NodeImageView
from trainyard.services.errors import Invalid, ServiceError


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
    if node is not None and node not in {n.name for n in backend.inventory()}:
        raise Invalid(f"no node named {node!r}", details=[{"path": "node", "message": f"no node named {node!r}"}])
    try:
        pulls = _cache(backend).pull_image(image, node)
    except ContainerError as exc:
        raise Invalid(str(exc)) from exc
    return [ImagePullView(node=p.node, image=p.image, pulled=p.pulled, seconds=round(p.seconds, 1), error=p.error,
                          message=p.note) for p in pulls]
