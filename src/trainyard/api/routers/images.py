"""HTTP routes for the image cache: the images on each node, pre-pulling one and evicting
one (admin)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from trainyard.api.deps import admin_user, current_user
from trainyard.api.openapi import errors
from trainyard.schemas.images import (
    ImagePullRequest,
    ImagePullView,
    ImageRemovalView,
    ImageRemoveRequest,
    NodeImageView,
)
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


@router.post("/images/remove", response_model=list[ImageRemovalView], responses=errors(401, 403, 409, 422))
def remove_image(body: ImageRemoveRequest, _: Annotated[UserRow, Depends(admin_user)],
                 ctx: Ctx) -> list[ImageRemovalView]:
    """Remove an image from a node (or every node) where it is, one entry per node (admin);
    409 while a task of a job that has not ended runs in it there. Never forced: a node
    whose engine has a container of the image keeps it, and its entry says so."""
    return images.remove_image(ctx.db, ctx.specs, ctx.backend, body.image, body.node)
