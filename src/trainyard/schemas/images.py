"""The API's models of the image cache: which node holds which container image, and pulls."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from trainyard.spec.checks import IMAGE_REFERENCE, IMAGE_REFERENCE_MAX


class NodeImageView(BaseModel):
    """One image on one node."""

    node: str
    image: str
    id: str
    sizeBytes: int
    createdAt: datetime | None  # when the image was made
    pulledAt: datetime | None  # when Trainyard last pulled it to the node (null: not Trainyard)


class ImagePullRequest(BaseModel):
    """Pull an image to a node ahead of the jobs that need it (admin)."""

    image: str = Field(min_length=1, max_length=IMAGE_REFERENCE_MAX, pattern=f"^{IMAGE_REFERENCE.pattern}$")
    node: str | None = Field(default=None, min_length=1, max_length=255, description="null: every node")


class ImagePullView(BaseModel):
    """What a pull did on one node."""

    node: str
    image: str
    pulled: bool  # false: it was there already, or the pull failed (error)
    seconds: float
    error: str
    message: str


class ImageRemoveRequest(BaseModel):
    """Remove an image from a node, or every node (admin)."""

    image: str = Field(min_length=1, max_length=IMAGE_REFERENCE_MAX, pattern=f"^{IMAGE_REFERENCE.pattern}$")
    node: str | None = Field(default=None, min_length=1, max_length=255, description="null: every node")


class ImageRemovalView(BaseModel):
    """What an eviction did on one node."""

    node: str
    image: str
    removed: bool  # false: it was not there, or it was kept (error)
    inUse: bool  # kept: a container on the node uses it
    error: str
    message: str
