"""The API's models of datasets (issue 35): registering one, granting it, how it is shown,
and what each node's cache holds."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from trainyard.schemas.requests import RequestBody, text_field


class RegisterDatasetRequest(RequestBody):
    source: str = text_field(4096, description="An http(s) URL (a .tar, .tar.gz or .tgz archive is unpacked; any "
                                               "other file is kept as it is), or storage:NAME/PATH, a folder of a "
                                               "storage you may read")
    version: str = text_field(128, default="", description="Any text naming this version of the data; a new "
                                                           "version is fetched again. Default: the sha256")
    sha256: str = text_field(64, default="", description="The archive's SHA-256 (hex), checked on every fetch")
    description: str = text_field(1000, default="")


class DatasetGrantRequest(RequestBody):
    grantee: str = text_field(65, description="A user name, or @group")


class DatasetView(BaseModel):
    name: str
    owner: str
    source: str
    version: str
    sha256: str
    description: str
    createdAt: datetime
    updatedAt: datetime
    access: str = Field(description="Why the caller may read it: owner, admin or granted")
    grants: list[str] = Field(description="Who else may read it: user names and @groups (owner and admins: all)")


class CacheEntryView(BaseModel):
    dataset: str
    version: str
    key: str = Field(description="The entry's name in the node's cache")
    bytes: int
    files: int
    fetchedAt: datetime | None
    lastUsedAt: datetime | None
    inUse: int = Field(description="Running tasks that read it: never evicted while any does")


class NodeCacheView(BaseModel):
    node: str
    capacityBytes: int
    usedBytes: int
    hits: int
    misses: int
    bytesFetched: int = Field(description="Bytes read from the datasets' sources (an archive's as sent, "
                              "compressed; usedBytes counts what they unpacked to)")
    evictions: int
    fetchFailures: int = Field(0, description="Fetches that failed (their bytes count in bytesFetched)")
    entries: list[CacheEntryView]
