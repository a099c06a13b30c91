"""The API's models of a job's files: a folder's listing under the job's directory or a
task's working directory (``GET /jobs/{id}/files``); downloads answer the file's bytes."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel

FileKind = Literal["file", "dir", "link", "other"]


class FileEntry(BaseModel):
    name: str
    type: FileKind  # "link": a symbolic link, shown with its text and never followed; "other": FIFO, socket, device
    size: int  # bytes, for a file; 0 otherwise
    modifiedAt: datetime
    target: str | None = None  # a link's text, as the job wrote it


class FileListing(BaseModel):
    job: int
    task: str | None  # ROLE/INDEX: that task's working directory; None: the job's directory
    attempt: int | None  # the attempt whose task it is (None for the job's directory)
    path: str  # the folder listed, relative to that directory ("" for the directory itself)
    entries: list[FileEntry]
    truncated: bool  # the folder holds more names than a listing shows
    omitted: int = 0  # names left out because they are not UTF-8
