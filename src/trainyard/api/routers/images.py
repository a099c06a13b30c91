"""HTTP routes for the image cache: the images on each node, and pre-pulling one (admin)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from trainyard.api.deps import admin_user, current_user
from trainyard.api.openapi import errors
from trainyard.schemas.images import ImagePullRequest, ImagePullView, NodeImageView
from trainyard.services import images
from trainyard.store.rows import UserRow
from trainyard.web.bodies import BodyRoute
from trainyard.web.context import AppContext, context

router = APIRouter(tags=["images"], route_class=BodyRoute)

Ctx = Annotated[AppContext, Depends(context)]


@router.get("/images", response_model=list[NodeImageView], responses=errors(401, 409))
def list_images(_: Annotated[UserRow, Depends(current_user)], ctx: Ctx) -> list[NodeImageView]:
    """Which node holds which container image (its id, size, when it was made, and when
    Trainyard last pulled it there)."""
    return images.node_images(ctx.backend)


@router.post("/images/pull", response_model=list[ImagePullView], responses=errors(401, 403, 409, 422))
def pull_image(body: ImagePullRequest, _: Annotated[UserRow, Depends(admin_user)],
               ctx: Ctx) -> list[ImagePullView]:
    """Pull an image to a node (or every node) ahead of the jobs that need it, unless it is
    there; answers when done, one entry per node (admin)."""
    return images.pull_image(ctx.backend, body.image, body.node)
