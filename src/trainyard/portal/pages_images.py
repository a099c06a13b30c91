"""The images page: which node holds which container image, its size, when it was made and
when Trainyard last pulled it there (OpenPAI's image cache); admins pull an image to a node,
or every node, ahead of the jobs that need it, and evict one from a node (or every node).

Every user may see it, as ``GET /api/v1/images`` answers every user; only an admin pulls
(``POST /api/v1/images/pull``) or evicts (``POST /api/v1/images/remove``). A pull answers
when done, as the API's does.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import Response

from trainyard.portal.auth import AdminAction, Page, Viewer
from trainyard.portal.changes import refusal_values
from trainyard.portal.templating import render
from trainyard.schemas.images import ImagePullView, ImageRemovalView, NodeImageView
from trainyard.services import images
from trainyard.services.errors import Invalid, ServiceError
from trainyard.spec.checks import IMAGE_REFERENCE, IMAGE_REFERENCE_MAX
from trainyard.web.context import AppContext, context

router = APIRouter()

Ctx = Annotated[AppContext, Depends(context)]


def _page(request: Request, viewer: Viewer, ctx: AppContext, *, pulls: list[ImagePullView] | None = None,
          removals: list[ImageRemovalView] | None = None, failed: ServiceError | None = None,
          form: dict[str, str] | None = None) -> Response:
    held: list[NodeImageView] = []
    unavailable = None
    try:
        held = images.node_images(ctx.backend)
    except images.NoImageCache as exc:
        unavailable = exc.message
    nodes = sorted(n.name for n in ctx.backend.inventory())
    return render(request, "images.html", user=viewer.user, web_session=viewer.web_session,
                  status_code=failed.status if failed else 200, images=held, unavailable=unavailable, nodes=nodes,
                  pulls=pulls or [], removals=removals or [], form=form or {}, image_max=IMAGE_REFERENCE_MAX,
                  **refusal_values(failed, None))


@router.get("/images")
def images_page(request: Request, viewer: Page, ctx: Ctx) -> Response:
    return _page(request, viewer, ctx)


@router.post("/images/pull")
def pull(request: Request, viewer: AdminAction, ctx: Ctx, image: Annotated[str, Form(max_length=IMAGE_REFERENCE_MAX)],
         node: Annotated[str, Form(max_length=255)] = "") -> Response:
    image = image.strip()
    try:
        _check(image)
        pulls = images.pull_image(ctx.backend, image, node or None)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc, form={"image": image, "node": node})
    return _page(request, viewer, ctx, pulls=pulls)


@router.post("/images/evict")
def evict(request: Request, viewer: AdminAction, ctx: Ctx, image: Annotated[str, Form(max_length=IMAGE_REFERENCE_MAX)],
          node: Annotated[str, Form(max_length=255)] = "") -> Response:
    image = image.strip()
    try:
        _check(image)
        removals = images.remove_image(ctx.db, ctx.specs, ctx.backend, image, node or None)
    except ServiceError as exc:
        return _page(request, viewer, ctx, failed=exc)
    return _page(request, viewer, ctx, removals=removals)


def _check(image: str) -> None:
    if not IMAGE_REFERENCE.fullmatch(image):
        raise Invalid(f"image: {image!r} is not an image reference such as python:3.12",
                      details=[{"path": "image", "message": "not an image reference"}])
