"""The portal's datasets page in process (issue 35): a user sees the datasets they may read
and their entries in each node's cache, never another user's private dataset; names and
texts are escaped."""

from __future__ import annotations

import re

from api.harness import Api
from backends.datasource import serving, tar_gz

from portal.harness import browser, signed_in
from trainyard.backends.base import DatasetFetch

XSS = '<script>alert(1)</script>'


def test_a_user_sees_the_datasets_they_may_read_and_their_cache_entries(api: Api) -> None:
    admin = api.sdk(api.admin_token)
    api.ctx.dataset_allowed_hosts = ("127.0.0.1",)  # the test's source, allowed as an admin would
    api.ctx.backend.datasets.cache.allowed_hosts = ("127.0.0.1",)
    with serving() as source:
        url = source.add("/d.tar.gz", tar_gz({"a": b"a" * 10}))
        api.sdk(api.user_token).register_dataset("mine", url, version="1", description=XSS)
        admin.register_dataset("private", url, version="1")
        for name in ("mine", "private"):
            fetch = DatasetFetch(name, url, "1", f"/data/{name}")
            api.ctx.backend.datasets.cache.ensure({"key": fetch.key, "name": name, "version": "1", "source": url,
                                                   "sha256": "", "storage_root": ""})
    page = signed_in(api, "alice").get("/datasets")
    assert page.status_code == 200
    assert re.findall(r'data-dataset="([^"]+)"', page.text) == ["mine"]
    assert re.findall(r'data-entry="([^"]+)"', page.text) == ["mine@1"]
    assert XSS not in page.text and "&lt;script&gt;" in page.text
    assert "0 hits, 2 misses" in page.text
    admin_page = signed_in(api, "admin").get("/datasets").text
    assert re.findall(r'data-entry="([^"]+)"', admin_page) == ["mine@1", "private@1"]
    assert browser(api).get("/datasets").status_code == 303
