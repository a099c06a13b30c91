"""The SDK's dataset calls (``Client`` has them): register, list, show, grant, revoke and
remove datasets, and read each node's dataset cache. ``/api/v1/datasets`` on the server."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

from trainyard.client_input import path_segment as _seg
from trainyard.client_models import REMOVAL, Model, Shape

if TYPE_CHECKING:
    import httpx

    from trainyard.schemas.admin import RemovalResult
    from trainyard.schemas.datasets import DatasetView, NodeCacheView

Reply = TypeVar("Reply")
_DATASET: Model[DatasetView] = Model("datasets.DatasetView")
_DATASETS: Model[list[DatasetView]] = Model("datasets.DatasetView", many=True)
_CACHES: Model[list[NodeCacheView]] = Model("datasets.NodeCacheView", many=True)


class DatasetCalls:
    """Mixed into ``Client``: these use its ``_request`` and ``_parse``."""

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        raise NotImplementedError

    def _parse(self, shape: Shape[Reply], content: bytes) -> Reply:
        raise NotImplementedError

    def datasets(self) -> list[DatasetView]:
        """The datasets you may read (an admin: all)."""
        return self._parse(_DATASETS, self._request("GET", "/datasets").content)

    def dataset(self, name: str) -> DatasetView:
        """One dataset you may read, by name."""
        return self._parse(_DATASET, self._request("GET", f"/datasets/{_seg(name)}").content)

    def register_dataset(self, name: str, source: str, *, version: str = "", sha256: str = "",
                         description: str = "") -> DatasetView:
        """Register a dataset (an http(s) URL, or ``storage:NAME/PATH``) at a version, or
        change yours: the next task that reads it fetches the new version."""
        body = {"source": source, "version": version, "sha256": sha256, "description": description}
        return self._parse(_DATASET, self._request("PUT", f"/datasets/{_seg(name)}", json=body).content)

    def remove_dataset(self, name: str, *, force: bool = False) -> RemovalResult:
        """Forget a dataset of yours (an admin: any); never its source's files. Refused (409,
        naming them) while waiting or running jobs read it, unless ``force``, which stops them."""
        response = self._request("DELETE", f"/datasets/{_seg(name)}", params={"force": str(force).lower()})
        return self._parse(REMOVAL, response.content)

    def grant_dataset(self, name: str, grantee: str) -> DatasetView:
        """Let a user, or ``@group``, read your dataset."""
        response = self._request("POST", f"/datasets/{_seg(name)}/grants", json={"grantee": grantee})
        return self._parse(_DATASET, response.content)

    def revoke_dataset(self, name: str, grantee: str, *, force: bool = False) -> DatasetView:
        """Take back a grant (``grantee``: a user's name, or ``@group``); refused (409) while it
        is what lets waiting or running jobs read the dataset, unless ``force``, which stops them."""
        response = self._request("DELETE", f"/datasets/{_seg(name)}/grants/{_seg(grantee)}",
                                 params={"force": str(force).lower()})
        return self._parse(_DATASET, response.content)

    def dataset_caches(self) -> list[NodeCacheView]:
        """Each node's dataset cache: capacity, use, hits, misses, bytes fetched, evictions and
        entries (those of datasets you may read; an admin: all)."""
        return self._parse(_CACHES, self._request("GET", "/datasets/cache").content)
