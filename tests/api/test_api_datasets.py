"""Datasets over HTTP and through the SDK (issue 35): any user registers one and owns it;
its owner grants it to users and groups; others neither see nor change it; a job naming a
dataset its user may not read is refused with the field path; bad input is a 4xx naming
the field."""

from __future__ import annotations

import contextlib

import pytest
from api.harness import Api
from backends.datasource import serving, tar_gz

from trainyard.backends.base import DatasetFetch
from trainyard.backends.datafetch import FetchError
from trainyard.client import Client, TrainyardError

URL = "https://data.example.org/imagenet-mini.tar.gz"


def allow_local(api: Api) -> None:
    """Let datasets come from the tests' source on 127.0.0.1, as an admin would (dataset_allowed_hosts)."""
    api.ctx.dataset_allowed_hosts = ("127.0.0.1",)
    api.ctx.backend.datasets.cache.allowed_hosts = ("127.0.0.1",)


def job(datasets: str, role: str = "") -> str:
    return f"name: j\ndatasets: {datasets}\ntaskRoles:\n  w:\n    commands: ['sleep 600']\n{role}"


def submit(api: Api, token: str, text: str) -> tuple[int, dict]:
    response = api.client(token).post("/api/v1/jobs", content=text, headers={"content-type": "application/yaml"})
    return response.status_code, response.json()


def bob(api: Api) -> tuple[Client, str]:
    admin = api.sdk(api.admin_token)
    admin.create_user("bob")
    token = admin.create_token(user="bob").token
    return api.sdk(token), token


def test_a_user_registers_a_dataset_and_grants_it_and_others_see_only_what_they_may_read(api: Api) -> None:
    alice, admin = api.sdk(api.user_token), api.sdk(api.admin_token)
    (bobs, _) = bob(api)
    made = alice.register_dataset("imagenet-mini", URL, version="v1", description="10 classes")
    assert (made.name, made.owner, made.version, made.access, made.grants) == ("imagenet-mini", "alice", "v1",
                                                                               "owner", [])
    assert bobs.datasets() == []
    with pytest.raises(TrainyardError) as hidden:
        bobs.dataset("imagenet-mini")
    assert hidden.value.status == 404
    assert [(d.name, d.access) for d in admin.datasets()] == [("imagenet-mini", "admin")]
    assert alice.grant_dataset("imagenet-mini", "bob").grants == ["bob"]
    assert [(d.name, d.access, d.grants) for d in bobs.datasets()] == [("imagenet-mini", "granted", ["bob"])]
    # Bob may read it, not change it; nor take its name.
    with pytest.raises(TrainyardError) as refused:
        bobs.grant_dataset("imagenet-mini", "@nobody")
    assert refused.value.status == 403
    with pytest.raises(TrainyardError) as taken:
        bobs.register_dataset("imagenet-mini", URL, version="v9")
    assert taken.value.status == 409
    # Its owner moves it to a new version; then revokes and removes it.
    assert alice.register_dataset("imagenet-mini", URL, version="v2").version == "v2"
    assert alice.revoke_dataset("imagenet-mini", "bob").grants == []
    assert bobs.datasets() == []
    alice.remove_dataset("imagenet-mini")
    assert admin.datasets() == []


def test_bad_registrations_get_4xx_with_the_field(api: Api) -> None:
    cases = (("x", {"source": "ftp://host/x.tar", "version": "1"}, "source"),
             ("x", {"source": "https://u:p@host/x.tar", "version": "1"}, "source"),
             ("x", {"source": URL}, "version"),
             ("x", {"source": URL, "sha256": "abc"}, "sha256"),
             ("x", {"source": "storage:nosuch/a", "version": "1"}, "source"),
             ("x", {"source": "storage:data/../etc", "version": "1"}, "source"),
             ("Bad", {"source": URL, "version": "1"}, "name"),
             ("cache", {"source": URL, "version": "1"}, "name"),
             ("x", {"source": URL, "version": 3}, "version"))
    api.sdk(api.admin_token).create_storage("data", "/srv/data")
    said = {"https://u:p@host/x.tar": "credentials in URLs (user:password@) are refused",
            "s3://bucket/x.tar": "the nodes hold no cloud credentials", "gs://bucket/x.tar": "pre-signed"}
    cases += tuple(("x", {"source": url, "version": "1"}, "source") for url in said if "@" not in url)
    for name, body, field in cases:
        response = api.user.put(f"/api/v1/datasets/{name}", json=body)
        assert response.status_code == 422, (body, response.text)
        assert response.json()["errors"][0]["path"].endswith(field), (body, response.text)
        assert said.get(str(body["source"]), "") in response.json()["errors"][0]["message"], response.text
    # A storage the user may not read is refused as such.
    response = api.user.put("/api/v1/datasets/x", json={"source": "storage:data/a", "version": "1"})
    assert response.status_code == 403 and "storage 'data'" in response.json()["detail"]
    # A sha256 alone is the version.
    digest = "ab" * 32
    assert api.sdk(api.user_token).register_dataset("x", URL, sha256=digest.upper()).version == digest


def test_a_storage_folder_the_server_sees_missing_is_a_422_at_registration(api: Api, tmp_path) -> None:
    (tmp_path / "sets" / "en").mkdir(parents=True)
    (tmp_path / "sets" / "link").symlink_to(tmp_path / "sets" / "en")
    admin = api.sdk(api.admin_token)
    admin.create_storage("real", str(tmp_path))
    for sub, said in (("sets/nosuch", "there is no folder 'sets/nosuch'"), ("sets/link", "a link")):
        response = api.admin.put("/api/v1/datasets/x", json={"source": f"storage:real/{sub}", "version": "1"})
        assert response.status_code == 422 and said in response.json()["errors"][0]["message"], response.text
    assert admin.register_dataset("x", "storage:real/sets/en", version="1").version == "1"


def test_a_url_at_the_servers_own_or_metadata_addresses_is_refused_unless_an_admin_allows_its_host(
        api: Api) -> None:
    """Nodes fetch datasets as root: a URL at loopback (the server's API, its database),
    link-local (cloud metadata) or an unspecified address, however spelled, is a 422 at
    ``source``; the admin's dataset_allowed_hosts lets a named host through."""
    for url in ("http://127.0.0.1:8000/api/v1/users", "http://localhost/x.tar", "http://2130706433/x.tar",
                "http://[::1]/x.tar", "http://[::ffff:127.0.0.1]/x.tar", "http://169.254.169.254/latest/meta-data",
                "http://0.0.0.0:5432/x.tar", "http://host:99999/x.tar"):
        response = api.user.put("/api/v1/datasets/x", json={"source": url, "version": "1"})
        assert response.status_code == 422, (url, response.text)
        assert response.json()["errors"][0]["path"] == "source", (url, response.text)
    assert "dataset_allowed_hosts" in api.user.put(
        "/api/v1/datasets/x", json={"source": "http://localhost/x.tar", "version": "1"}).json()["detail"]
    api.ctx.dataset_allowed_hosts = ("localhost",)
    assert api.sdk(api.user_token).register_dataset("x", "http://localhost/x.tar", version="1").version == "1"


def test_a_job_is_refused_at_submit_for_a_dataset_its_user_may_not_read(api: Api) -> None:
    (bobs, bob_token) = bob(api)
    bobs.register_dataset("corpus", URL, version="1")
    status, body = submit(api, api.user_token, job("[{name: corpus, mountPath: /data/corpus}]"))
    assert status == 403 and body["errors"][0]["path"] == "datasets[0].name" and "'corpus'" in body["detail"]
    assert "`yard dataset grant corpus --user alice`" in body["detail"]  # the command as it runs
    status, body = submit(api, api.user_token, job("[]", "    datasets: [{name: nosuch}]\n"))
    assert status == 422 and body["errors"][0]["path"] == "taskRoles.w.datasets[0].name"
    bobs.grant_dataset("corpus", "alice")
    status, body = submit(api, api.user_token, job("[{name: corpus, mountPath: /etc/corpus}]"))
    assert status == 422 and body["errors"][0]["path"] == "datasets[0].mountPath"
    assert "a dataset may be mounted only under" in body["detail"] and "storage" not in body["detail"].split(";")[-1]
    status, body = submit(api, api.user_token, job("[{name: corpus, mountPath: relative}]"))
    assert status == 422 and body["errors"][0]["path"] == "datasets[0].mountPath"
    status, body = submit(api, api.user_token,
                          job("[{name: corpus}]", "    storages: []\n    datasets: [{name: corpus}, {name: corpus}]\n"))
    assert status == 422 and body["errors"][0]["path"] == "taskRoles.w.datasets[1].name"
    status, body = submit(api, api.user_token, job("[{name: corpus}]"))
    assert status == 201, body
    status, body = submit(api, bob_token, job("[{name: corpus, mountPath: /data}]"))
    assert status == 201, body


def test_removing_or_revoking_a_dataset_a_waiting_job_reads_is_a_409_naming_it_unless_forced(api: Api) -> None:
    """As a storage's: the job would fail at its start; ``force`` stops it instead."""
    (bobs, _) = bob(api)
    bobs.register_dataset("corpus", URL, version="1")
    bobs.grant_dataset("corpus", "alice")
    status, body = submit(api, api.user_token, job("[{name: corpus}]"))
    assert status == 201, body
    job_id = body["id"]
    for call in (lambda force: bobs.revoke_dataset("corpus", "alice", force=force),
                 lambda force: bobs.remove_dataset("corpus", force=force)):
        with pytest.raises(TrainyardError) as refused:
            call(False)
        assert refused.value.status == 409 and f"job {job_id} (alice, WAITING)" in refused.value.message
        assert [g for v in bobs.datasets() for g in v.grants] == ["alice"]  # nothing changed
        with pytest.raises(TrainyardError) as refused:  # force stops only your own jobs, unless an admin
            call(True)
        assert refused.value.status == 409 and "only an admin" in refused.value.message
    removed = api.sdk(api.admin_token).remove_dataset("corpus", force=True)
    assert removed.stoppedJobs == [job_id]
    assert api.sdk(api.user_token).job(job_id).state in ("STOPPING", "STOPPED")


def test_the_nodes_caches_are_shown_in_yard_dataset_cache_and_metrics(api: Api) -> None:
    alice, admin = api.sdk(api.user_token), api.sdk(api.admin_token)
    (bobs, _) = bob(api)
    allow_local(api)
    with serving() as source:
        archive = tar_gz({"a": b"a" * 100})
        url = source.add("/c.tar.gz", archive)
        alice.register_dataset("corpus", url, version="1")
        bobs.register_dataset("private", url, version="1")
        cache = api.ctx.backend.datasets.cache
        for name, at in (("corpus", url), ("private", url), ("corpus", url), ("gone", source.url + "/gone")):
            fetch = DatasetFetch(name, at, "1", f"/data/{name}")
            with contextlib.suppress(FetchError):  # the last: a 404, a failed fetch
                cache.ensure({"key": fetch.key, "name": name, "version": "1", "source": at, "sha256": "",
                              "storage_root": ""})
    (mine,) = alice.dataset_caches()
    # Fetched: as read from the source (the archive, twice); used: as unpacked.
    assert (mine.hits, mine.misses, mine.bytesFetched, mine.usedBytes, mine.evictions) == (1, 2, 2 * len(archive), 200,
                                                                                            0)
    assert [(e.dataset, e.version, e.bytes, e.files) for e in mine.entries] == [("corpus", "1", 100, 1)]
    assert [e.dataset for e in admin.dataset_caches()[0].entries] == ["corpus", "private"]
    page = api.admin.get("/metrics").text
    node = mine.node
    assert f'trainyard_dataset_cache_hits_total{{node="{node}"}} 1.0' in page
    assert f'trainyard_dataset_cache_fetched_bytes_total{{node="{node}"}} {2 * len(archive)}.0' in page
    assert f'trainyard_dataset_cache_entry_bytes{{dataset="private",node="{node}",version="1"}} 100.0' in page
    assert f'trainyard_dataset_cache_fetch_failures_total{{node="{node}"}} 1.0' in page
    assert mine.fetchFailures == 1


def test_a_dataset_mounted_over_another_mount_point_is_refused_at_its_field(api: Api) -> None:
    alice = api.sdk(api.user_token)
    alice.register_dataset("a", URL, version="1")
    alice.register_dataset("b", URL, version="1")
    status, body = submit(api, api.user_token, job("[{name: a, mountPath: /data/x}, {name: b, mountPath: /data/x/y}]"))
    assert status == 422 and body["errors"][0]["path"] == "datasets[0].mountPath" and "'b'" in body["detail"]


def test_a_cached_entry_of_an_earlier_dataset_of_a_name_is_not_shown_to_its_new_owner(api: Api) -> None:
    alice, admin = api.sdk(api.user_token), api.sdk(api.admin_token)
    (bobs, _) = bob(api)
    allow_local(api)
    with serving() as source:
        url = source.add("/s.tar.gz", tar_gz({"a": b"a"}))
        alice.register_dataset("secret", url, version="q3-layoffs")
        fetch = DatasetFetch("secret", url, "q3-layoffs", "/data/secret")
        api.ctx.backend.datasets.cache.ensure({"key": fetch.key, "name": "secret", "version": "q3-layoffs",
                                               "source": url, "sha256": "", "storage_root": ""}, use=False)
    assert [e.version for e in alice.dataset_caches()[0].entries] == ["q3-layoffs"]
    alice.remove_dataset("secret")
    bobs.register_dataset("secret", URL, version="1")
    assert bobs.dataset_caches()[0].entries == []
    assert [e.version for e in admin.dataset_caches()[0].entries] == ["q3-layoffs"]
