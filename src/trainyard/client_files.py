"""The SDK's file calls (``Client`` has them): a job's files out (list, download with a
range), and a project folder in (``upload_workdir``, ``client_workdir``'s packing)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from trainyard.client_input import checked_id as _job_id
from trainyard.client_input import given
from trainyard.client_models import Model, Shape
from trainyard.client_workdir import send as send_workdir

if TYPE_CHECKING:
    import httpx

    from trainyard.schemas.files import FileListing
    from trainyard.schemas.workdirs import WorkdirView

Reply = TypeVar("Reply")
_LISTING: Model[FileListing] = Model("files.FileListing")
Folder = str | os.PathLike[str]  # a folder on this machine: a working directory to send


class FileCalls:
    """Mixed into ``Client``: these use its ``_request``, ``_parse``, ``_sending``, ``_http``
    and ``_raise_for``."""

    _http: httpx.Client

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        raise NotImplementedError

    def _parse(self, shape: Shape[Reply], content: bytes) -> Reply:
        raise NotImplementedError

    def _sending(self, method: str, path: str) -> AbstractContextManager[None]:
        raise NotImplementedError

    def _raise_for(self, response: httpx.Response) -> None:
        raise NotImplementedError

    def files(self, job_id: int, path: str = "", *, task: str | None = None, attempt: int | None = None) -> FileListing:
        """A folder of the job's directory, or of task ``task``'s working directory (``attempt``: the latest)."""
        params = given(path=path, task=task, attempt=attempt)
        return self._parse(_LISTING, self._request("GET", f"/jobs/{_job_id(job_id)}/files", params=params).content)

    def download(self, job_id: int, path: str, *, task: str | None = None, attempt: int | None = None,
                 offset: int = 0) -> Iterator[bytes]:
        """A file of the job's directory or a task's working directory, streamed from byte ``offset`` (a Range)."""
        params, headers = given(path=path, task=task, attempt=attempt), {"Range": f"bytes={offset}-"} if offset else {}
        with self._sending("GET", "download"), self._http.stream(
                "GET", f"/jobs/{_job_id(job_id)}/files/download", params=params, headers=headers, timeout=None) as got:
            if not got.is_success and got.status_code != 416:  # 416: nothing past ``offset``, it is whole already
                got.read()
                self._raise_for(got)
            yield from got.iter_bytes() if got.is_success else ()

    def upload_workdir(self, folder: Folder) -> WorkdirView:
        """Send a project folder (what its ``.gitignore`` and ``.yardignore`` files leave in),
        unless the server holds the same content already; its digest names it in a job file's
        ``workdir``. A folder past the server's limit is refused before sending, naming its
        biggest files."""
        return send_workdir(self, Path(folder).expanduser())  # type: ignore[arg-type]
