"""Datasets under the real controller and local backend (issue 35): a job reads its
registered dataset at its mountPath, the second job reads it from the node's cache without
a fetch, a new version is fetched again, and a dataset whose grant was taken back since the
submit fails the launch with the reason."""

from __future__ import annotations

import pytest
from backends.datasource import serving, tar_gz

from trainyard.backends.base import TaskKey
from trainyard.backends.simulated import SimulatedBackend
from trainyard.controller.launching import task_key
from trainyard.controller.loop import Controller
from trainyard.core.clock import FakeClock, SystemClock
from trainyard.services import auth
from trainyard.services import datasets as dataset_service
from trainyard.services import jobs as job_service
from trainyard.spec.loading import parse_job
from trainyard.store.rows import JobRow

JOB = ("name: r\ndatasets: [{name: corpus, mountPath: /data/corpus}]\ntaskRoles:\n  m:\n"
       "    commands: ['cat $TRAINYARD_DATASET_CORPUS/words.txt']\n")


LOCAL = ("127.0.0.1",)  # the test's source's host, allowed as an admin would (dataset_allowed_hosts)


@pytest.fixture
def world(make_world):
    return make_world(backend_options={"dataset_sources": (60.0, LOCAL)})


def register(world, url: str, version: str) -> None:
    with world.db.session() as s:
        dataset_service.register_dataset(s, world.user, "corpus", source=url, version=version, sha256="",
                                         description="", clock=SystemClock(), allowed_hosts=LOCAL)


def test_jobs_read_a_dataset_fetched_once_per_version(world) -> None:
    with serving() as source:
        url = source.add("/corpus.tar.gz", tar_gz({"words.txt": b"one\n"}))
        register(world, url, "1")
        for _ in range(2):
            job_id = world.submit(JOB)
            assert world.drive(job_id).state == "SUCCEEDED"
        assert source.requests == ["/corpus.tar.gz"]
        source.bodies["/corpus.tar.gz"] = tar_gz({"words.txt": b"two\n"})
        register(world, url, "2")
        job_id = world.submit(JOB)
        assert world.drive(job_id).state == "SUCCEEDED"
        assert len(source.requests) == 2
    # `yard job` says which datasets, at which versions, its tasks were launched to read.
    read = [message for kind, message in world.events(job_id) if kind == "datasets"]
    assert read == ["attempt 0, role m: corpus (version 2) at /data/corpus"]
    log = world.backend.read_log(_key(world, job_id))
    assert log.data.decode().splitlines()[-1] == "two"
    (cache,) = world.backend.dataset_caches()
    assert (cache.hits, cache.misses) == (1, 2)
    assert sorted(e.version for e in cache.entries) == ["1", "2"]


def _key(world, job_id: int) -> TaskKey:
    job = world.job(job_id)
    attempt = world.attempts(job_id)[-1]
    return task_key(job, attempt, world.tasks(job_id)[0])


def test_a_dataset_no_longer_readable_at_launch_fails_the_job_with_the_reason(world) -> None:
    register(world, "http://127.0.0.1:9/corpus.tar.gz", "1")
    job_id = world.submit(JOB)
    with world.db.session() as s:
        dataset_service.remove_dataset(s, world.user, "corpus")
    job = world.drive(job_id)
    assert job.state == "FAILED"
    assert world.tasks(job_id)[0].message == ("dataset 'corpus' (datasets[0]) cannot be read any more: it was "
                                              "removed")


def test_a_dataset_that_cannot_be_fetched_fails_the_job_saying_so_not_command_not_found(world) -> None:
    with serving() as source:
        register(world, source.url + "/gone.tar.gz", "1")
        job = world.drive(world.submit(JOB))
    assert job.state == "FAILED"
    why = f"dataset corpus (version 1): could not fetch {source.url}/gone.tar.gz: HTTP 404 Not Found"
    [task] = world.tasks(job.id)
    assert (task.exit_code, task.message) == (127, why)
    assert dict(world.events(job.id))["failed"].endswith(f"task m/0: {why}")  # `yard job`'s and `yard jobs`' words
    assert "command not found" not in job.state_message


def test_a_job_with_datasets_on_a_backend_without_a_cache_fails_at_launch_saying_so(db) -> None:
    clock = FakeClock()
    controller = Controller(db, SimulatedBackend(1, 8, clock=clock), clock)
    with db.session() as s:
        alice = auth.create_user(s, "alice", is_admin=False, clock=clock)
        dataset_service.register_dataset(s, alice, "corpus", source="https://example.org/c.tar", version="1",
                                         sha256="", description="", clock=clock)
    controller.run_once()
    with db.session() as s:
        job_id = job_service.submit_job(s, s.merge(alice), parse_job(JOB), clock=clock).id
    for _ in range(3):
        controller.wake()
        controller.run_once()
    with db.session() as s:
        job = s.get(JobRow, job_id)
        assert job.state == "FAILED"
        assert "keeps no dataset cache" in job.state_message


def test_a_waiting_jobs_dataset_is_fetched_before_it_starts(world) -> None:
    with serving() as source:
        url = source.add("/corpus.tar.gz", tar_gz({"words.txt": b"ahead\n"}))
        register(world, url, "1")
        blocker = world.submit("name: b\ntaskRoles:\n  m:\n    resourcePerInstance: {gpu: 4}\n"
                               "    commands: ['sleep 600']\n")
        world.drive(blocker, ("RUNNING",))
        job_id = world.submit(JOB.replace("  m:\n", "  m:\n    resourcePerInstance: {gpu: 1}\n"))
        second = world.submit(JOB.replace("  m:\n", "  m:\n    resourcePerInstance: {gpu: 1}\n"))
        world.cycle()
        assert world.job(job_id).state == "WAITING" and world.job(job_id).pending_position == 1
        # Backfill reserves the node for it: its dataset goes there (every node, None, for a job without).
        node = world.backend.inventory()[0].name
        assert world.controller.prefetcher.reserved == {job_id: (node,)}
        assert world.controller.prefetcher.prefetch() == {node: ["corpus"], None: ["corpus"]}
        assert source.requests == ["/corpus.tar.gz"]
        (cache,) = world.backend.dataset_caches()
        assert [(e.dataset, e.in_use) for e in cache.entries] == [("corpus", 0)]  # fetched, mounted by no task yet
        # A fetch, and no hit: the second ask (None) found it there, as every later prefetch of it will.
        assert (cache.misses, cache.hits) == (1, 0)
        # The node holding it is the job's to prefer (one node here: the scheduler's tie-break is tested alone).
        assert world.controller.prefetcher.data_nodes[job_id] == frozenset({node})
        # A job just submitted has them from the cycle that first sees it (most jobs start in that
        # cycle, before the prefetcher looks again); one without datasets has none.
        third = world.submit(JOB.replace("  m:\n", "  m:\n    resourcePerInstance: {gpu: 1}\n"))
        plain = world.submit("name: p\ntaskRoles:\n  m:\n    resourcePerInstance: {gpu: 1}\n    commands: ['true']\n")
        prefetcher = world.controller.prefetcher
        with world.db.session() as s:
            pending = world.controller.waiting.load(s, 0.0, prefetcher.data_nodes, prefetcher.arriving)
        found = {j.job_id: j.data_nodes for j in pending}
        assert found == {job_id: {node}, second: {node}, third: {node}, plain: frozenset()}
        for other in (blocker, second, third, plain):
            world.stop(other)
        assert world.drive(job_id).state == "SUCCEEDED"
        log = world.backend.read_log(_key(world, job_id)).data.decode()
        assert "is in this node's cache" in log and log.splitlines()[-1] == "ahead"
        (cache,) = world.backend.dataset_caches()
        assert (cache.misses, cache.hits) == (1, 1)  # the hit is the task's, however often it was prefetched
        assert source.requests == ["/corpus.tar.gz"]
