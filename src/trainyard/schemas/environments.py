"""The API's models of environments (``yard env``): creating one, and how one is shown."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from trainyard.core.names import ENVIRONMENT_NAME, GROUP_OR_VC_NAME
from trainyard.schemas.requests import RequestBody, text_field

MAX_REQUIREMENTS_BYTES = 64 * 1024  # a requirements file, passed to its build job in its env


class CreateEnvironmentRequest(RequestBody):
    """A custom environment (``requirements``, optionally on a ``base``), or, for admins, a
    base one (``basePath`` of a Python environment present on every node, or ``image``)."""

    name: str = text_field(64, rule=ENVIRONMENT_NAME)
    requirements: str | None = text_field(
        MAX_REQUIREMENTS_BYTES, default=None,
        description="A pip requirements file's text (custom environments); pip options such as "
                    "--index-url or --find-links may be lines of it",
    )
    base: str | None = text_field(64, default=None, description="The base environment to build on (custom)")
    basePath: str | None = text_field(
        4096, default=None, description="Admins: the prefix of a Python environment every node has, e.g. "
                                        "/opt/conda/envs/torch (its bin/python runs jobs)")
    image: str | None = text_field(1024, default=None, description="Admins: a container image as a base environment")
    group: str | None = text_field(64, default=None, rule=GROUP_OR_VC_NAME,
                                   description="Share it with this group's members (default: its owner alone; "
                                               "a base environment: every user)")
    virtualCluster: str | None = text_field(64, default=None, rule=GROUP_OR_VC_NAME,
                                            description="Where its build job runs (default: default)")


class EnvironmentView(BaseModel):
    name: str
    owner: str
    kind: str = Field(description="base (an admin's) or custom (built by Trainyard)")
    visibility: str = Field(description="private, group or everyone")
    group: str | None
    base: str | None = Field(description="The base environment a custom one is built on")
    path: str | None = Field(description="Its prefix on every node ($VIRTUAL_ENV of its jobs)")
    image: str | None
    state: str = Field(description="BUILDING, READY or FAILED")
    message: str
    buildJobId: int | None = Field(description="The job that builds it: `yard logs ID` shows the build")
    requirements: str
    createdAt: datetime
    finishedAt: datetime | None
