"""The API's models of storages: creating one, granting it, and how it is shown."""

from __future__ import annotations

from pydantic import BaseModel, Field

from trainyard.core.names import GROUP_OR_VC_NAME
from trainyard.schemas.requests import RequestBody, text_field


class CreateStorageRequest(RequestBody):
    name: str = text_field(64, rule=GROUP_OR_VC_NAME)
    path: str = text_field(4096, description="The absolute path every node has the storage mounted at")
    readOnly: bool = Field(default=False, description="Read-only for every job, whatever the grant")
    kind: str = text_field(32, default="", description="Free text: nfs, lustre, 3fs, local...")
    description: str = text_field(1000, default="")


class StorageGrantRequest(RequestBody):
    grantee: str = text_field(65, description="A user name, or @group")
    readOnly: bool = Field(default=False, description="The grantee may mount it read-only only")


class StorageGrantView(BaseModel):
    grantee: str  # a user name, or @group
    readOnly: bool


class StorageView(BaseModel):
    name: str  # an admin's storage; "home" (each user's own) or "@group" (a group's) when enabled
    path: str  # for "home": the caller's own folder
    readOnly: bool  # read-only for every job
    kind: str
    description: str
    builtin: bool = Field(description="A home or group storage the server provides, not an admin's")
    access: str = Field(description="The caller's: read-write, read-only or none")
    grants: list[StorageGrantView] = Field(description="Who may mount it (an admin sees all; a user, their own)")
    notes: list[str] = Field(default_factory=list,
                             description="For admins: what looks wrong in its folder, as this server sees it")
