"""Datasets on the Slurm backend (issue 35): each compute node keeps its own cache, which the
task runner fills as root before the task starts (the local backend's cache code, run on
the node); the task, as its owner's account in its sandbox, finds each dataset read-only at
its mountPath. Two tasks on one node share one fetch, two nodes fetch once each, a later job
on the node hits; a folder the owner's account may not read is refused, and a fetch that
fails midway leaves no entry to mount. A full cache evicts the least recently used entry
that no running task mounts, a new version is fetched again where the old one is, and a
fetch stopped midway (its job stopped) is never mounted and is fetched whole by the next.
What each node's cache holds reaches the server (``DatasetCaches``) through the nodes'
reports in the state directory."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from backends.datasource import serving, tar_gz
from e2e.server import wait_until
from podman_support import needs_podman
from sqlalchemy import select

from slurm.cluster import drive, submit
from slurm.conftest import make_world, per_user
from trainyard.backends.base import DatasetFetch, TaskKey
from trainyard.backends.containers import ContainerEngine
from trainyard.backends.doctor import Status
from trainyard.backends.slurm import datasetstep
from trainyard.backends.slurm.commands import SlurmCommands
from trainyard.backends.slurm.datasets import SlurmDatasets, cache_base
from trainyard.backends.slurm.datasetstep import PLAN
from trainyard.cli.doctor import check_dataset_caches
from trainyard.core.clock import SystemClock
from trainyard.services import datasets as dataset_service
from trainyard.services import jobs as job_service
from trainyard.services import storages as storage_service
from trainyard.spec.loading import parse_job
from trainyard.store.rows import TaskRow

JOB_AGAIN = ("name: again\ndatasets: [{name: corpus}]\ntaskRoles:\n  main:\n    commands:\n"
             "      - cat \"$TRAINYARD_DATASET_CORPUS/words.txt\"\n")
CAPACITY = 1 << 20  # the nodes' caches here: 1 MiB, so that a 2 MiB dataset fails midway


def this_machine(slurm) -> str:
    """The address the nodes reach this machine at: their bridge's (``scripts/dev-slurm.sh``:
    SUBNET.1), or 127.0.0.1 where every node is this machine's loopback."""
    address = slurm.nodes()[0]["NodeAddr"]
    return address if address == "127.0.0.1" else address.rsplit(".", 1)[0] + ".1"


@pytest.fixture
def data_world(slurm, tmp_path, outside_tmp, _sqlite_template) -> Iterator:
    """Per-user accounts and the sandbox (as ``yard up`` as root), Podman for images, 1 MiB caches,
    URLs on this machine allowed (``this_machine``, as an admin would), and a storage ``data``
    (root's, 0755) that alice may read: corpus/ (hers to read), private/ (root's alone) and big/ (2 MiB)."""
    for world in make_world(slurm, tmp_path, _sqlite_template, dataset_cache=(tmp_path / "caches", CAPACITY),
                            dataset_sources=(60.0, (this_machine(slurm),)),
                            containers=ContainerEngine.find("podman", "runc"), **per_user()):
        world.controller.prefetcher.interval = math.inf  # its waiting jobs' fetches would blur the counts
        data = outside_tmp / "data"
        (data / "corpus").mkdir(parents=True)
        (data / "corpus" / "words.txt").write_text("hello\n")
        (data / "private").mkdir(mode=0o700)
        (data / "private" / "key").write_text("secret\n")
        (data / "big").mkdir()
        (data / "big" / "a").write_bytes(b"x" * (2 * CAPACITY))
        with world.db.session() as s:
            storage_service.create_storage(s, "data", str(data), read_only=True, kind="local", description="",
                                           clock=SystemClock())
            storage_service.grant_storage(s, "data", "alice", read_only=True)
            for name in ("corpus", "private", "big"):
                dataset_service.register_dataset(s, s.merge(world.user), name, source=f"storage:data/{name}",
                                                 version="1", sha256="", description="", clock=SystemClock())
        yield world


def _register(world, name: str, source: str, version: str) -> None:
    with world.db.session() as s:
        dataset_service.register_dataset(s, s.merge(world.user), name, source=source, version=version, sha256="",
                                         description="", clock=SystemClock(),
                                         allowed_hosts=(this_machine(world.slurm),))


def _reader(name: str, command: str, resources: str = "{cpu: 1, memoryMB: 256}") -> str:
    return (f"name: {name}\ndatasets: [{{name: {name}, mountPath: /data/{name}}}]\ntaskRoles:\n  main:\n"
            f"    resourcePerInstance: {resources}\n    commands: ['{command}']\n")


# A whole node's GPUs: only an idle node fits it, and every idle node fits alike, so that the
# job's data_nodes (the prefetcher's finding, set by the test) decide which (a tie-break).
WHOLE_NODE = "{gpu: 4, cpu: 1, memoryMB: 256}"


def _run_on(world, node: str, text: str) -> TaskRow:
    """Run a one-task job on ``node`` (an idle node), to its success; its task."""
    job_id = submit(world, text)
    world.controller.prefetcher.data_nodes = {job_id: frozenset({node})}
    assert drive(world, job_id, timeout=60).state == "SUCCEEDED"
    [task] = _tasks(world, job_id)
    assert task.node == node
    return task


def _stop(world, job_id: int) -> None:
    job_service.stop_job(world.db, world.user, job_id, clock=SystemClock())
    assert drive(world, job_id, timeout=60).state == "STOPPED"


def _tasks(world, job_id: int) -> list[TaskRow]:
    with world.db.session() as s:
        return list(s.scalars(select(TaskRow).where(TaskRow.job_id == job_id).order_by(TaskRow.index)))


def _log(world, task: TaskRow, lines: int) -> list[str]:
    """The last ``lines`` of the task's log (the runner records the task's end before Slurm
    has written the last of its output)."""
    key = TaskKey(task.job_id, 0, task.role, task.index)

    def last() -> list[str] | None:
        found = world.backend.read_log(key).data.decode().splitlines()
        return found[-lines:] if len(found) >= lines else None

    return wait_until(last, what=f"task {task.role}/{task.index}'s log")


def _caches(world) -> dict:
    return {c.node: c for c in world.backend.dataset_caches()}


def test_each_node_fetches_a_dataset_once_its_tasks_share_it_read_only_and_a_later_job_hits(data_world) -> None:
    world = data_world
    # Four tasks of two GPUs: two nodes, two tasks each (a node has four GPUs).
    job_id = submit(world, """
name: readers
datasets: [{name: corpus, mountPath: /data/corpus}]
taskRoles:
  main:
    instances: 4
    resourcePerInstance: {gpu: 2, cpu: 1, memoryMB: 256}
    commands:
      - cat /data/corpus/words.txt
      - awk '$5 == "/data/corpus" { split($6, o, ","); print o[1] }' /proc/self/mountinfo
""")
    assert drive(world, job_id, timeout=60).state == "SUCCEEDED"
    tasks = _tasks(world, job_id)
    nodes = {t.node for t in tasks}
    assert len(nodes) == 2
    for task in tasks:
        assert _log(world, task, 2) == ["hello", "ro"]
    caches = _caches(world)
    for node in nodes:  # one fetch per node, the other task found it there; no task mounts it now
        cache = caches[node]
        assert (cache.misses, cache.hits) == (1, 1), cache
        assert [(e.dataset, e.version, e.in_use) for e in cache.entries] == [("corpus", "1", 0)]
        assert cache.bytes_fetched == len("hello\n")
    # A later job, placed where its data is (the prefetcher's finding, ``PendingJob.data_nodes``), hits.
    later = submit(world, JOB_AGAIN)
    world.controller.prefetcher.data_nodes = {later: frozenset(nodes)}
    assert drive(world, later, timeout=60).state == "SUCCEEDED"
    [task] = _tasks(world, later)
    assert task.node in nodes
    assert _log(world, task, 2) == ["trainyard: dataset corpus (version 1) is in this node's cache", "hello"]
    cache = _caches(world)[task.node]
    assert (cache.misses, cache.hits) == (1, 2)
    # A prefetch to a node that has not got it: a short Slurm job there fetches it, mounted by no task.
    other = sorted({n.name for n in world.backend.inventory() if n.schedulable} - nodes)[0]
    with world.db.session() as s:
        fetches = dataset_service.task_datasets(s, s.merge(world.user), parse_job(JOB_AGAIN), "main")
    world.backend.prefetch(fetches, other)
    cache = _caches(world)[other]
    assert (cache.misses, cache.hits, [(e.dataset, e.in_use) for e in cache.entries]) == (1, 0, [("corpus", 0)])
    world.backend.prefetch(fetches, other)  # held there now, as its report says: no Slurm job, no hit
    assert _caches(world)[other].hits == 0


def test_a_folder_its_owner_may_not_read_is_refused_and_a_failed_fetch_leaves_nothing_to_mount(data_world) -> None:
    world = data_world
    # Two jobs (a job's first failed task would stop the other before its fetch).
    jobs = {role: submit(world, f"name: {role}\ndatasets: [{{name: {role}, mountPath: /data/{role}}}]\n"
                                "taskRoles:\n  main:\n    commands: [ls /data]\n") for role in ("private", "big")}
    said = {"private": "may not read the folder", "big": "bigger than this node's cache"}
    for job_id in jobs.values():  # both ended before any cache is looked at (they may share a node)
        assert drive(world, job_id, timeout=60).state == "FAILED"
    for name, job_id in jobs.items():
        [task] = _tasks(world, job_id)
        assert said[name] in _log(world, task, 1)[0]
        assert task.exit_code == 127 and said[name] in task.message  # its status says why, not only its log
        assert task.message.startswith(f"dataset {name} (version ") and "command not found" not in task.message
        root = world.backend.datasets.root(task.node)
        assert not any((root / "entries").iterdir())  # nothing a task could mount
        assert not any((root / "partial").iterdir())  # the midway fetch's files are gone
        assert _caches(world)[task.node].entries == ()


def test_a_full_cache_evicts_the_least_recently_used_entry_no_task_mounts_and_a_new_version_is_fetched_again(
        data_world, outside_tmp) -> None:
    world = data_world
    data = outside_tmp / "data"
    for name in "abcd":  # 300 KiB each: three fit the 1 MiB cache, a fourth needs room
        (data / name).mkdir()
        (data / name / "x").write_text(name * (300 << 10))
        _register(world, name, f"storage:data/{name}", "1")
    # A task mounts a, and goes on running: a is the least recently used entry from here on.
    holder = submit(world, _reader("a", "head -c 3 /data/a/x; echo; sleep 600"))
    drive(world, holder, ("RUNNING",))
    [task] = _tasks(world, holder)
    wait_until(lambda: "aaa" in world.backend.read_log(TaskKey(holder, 0, "main", 0)).data.decode().splitlines(),
               what="the holder's task to read a")
    node = task.node
    with world.db.session() as s:
        fetches = {n: dataset_service.task_datasets(s, s.merge(world.user), parse_job(_reader(n, "true")), "main")
                   for n in "bcd"}
    for name in "bcd":  # each a short Slurm job on the node, in turn: d finds the cache full
        world.backend.prefetch(fetches[name], node)
    cache = _caches(world)[node]
    # b went: the least recently used of those no task mounts; a, older, is mounted.
    assert ({e.dataset: e.in_use for e in cache.entries}, cache.evictions) == ({"a": 1, "c": 0, "d": 0}, 1)
    # A new version of a (its files changed) while its old one is in the node's cache.
    _stop(world, holder)
    (data / "a" / "x").write_text("A" * (300 << 10))
    _register(world, "a", "storage:data/a", "2")
    task = _run_on(world, node, _reader("a", "head -c 3 /data/a/x; echo", WHOLE_NODE))
    first, last = _log(world, task, 2)
    assert first.startswith("trainyard: dataset a (version 2): fetched ") and last == "AAA"  # never the old one
    cache = _caches(world)[node]
    assert sorted((e.dataset, e.version) for e in cache.entries) == [("a", "2"), ("c", "1"), ("d", "1")]
    assert (cache.misses, cache.hits, cache.evictions) == (5, 0, 2)  # a's version 1 was then the oldest unmounted


def test_a_fetch_stopped_midway_is_never_mounted_and_the_next_task_on_its_node_fetches_it_whole(data_world) -> None:
    world = data_world
    with serving(this_machine(world.slurm)) as source:
        url = source.add("/mini.tar.gz", tar_gz({"words.txt": b"whole\n"}))
        _register(world, "mini", url, "1")
        source.hold.clear()  # the source answers nothing until released: the node's fetch is under way
        # A stop ends the fetch at once (its relayed SIGURG), not when Slurm cancels the step after
        # the grace period: 600 s here, ten times what ``_stop`` waits for STOPPED.
        stopped = submit(world, "stopGracePeriodSeconds: 600\n" + _reader("mini", "echo ran", WHOLE_NODE))

        def fetching() -> bool:
            world.controller.wake()
            world.controller.run_once()
            return bool(source.requests)

        wait_until(fetching, timeout=60, what="the node's fetch to ask the source")
        [task] = _tasks(world, stopped)
        root = world.backend.datasets.root(task.node)
        [left] = (root / "partial").iterdir()
        _stop(world, stopped)
        key = left.name.split(".")[0]
        assert not (root / "entries" / key).exists()  # nothing a task could mount
        assert "ran" not in world.backend.read_log(TaskKey(stopped, 0, "main", 0)).data.decode().splitlines()
        source.hold.set()
        again = _run_on(world, task.node, _reader("mini", "cat /data/mini/words.txt", WHOLE_NODE))
        first, last = _log(world, again, 2)
        assert first.startswith("trainyard: dataset mini (version 1): fetched ") and last == "whole"
        assert list((root / "partial").iterdir()) == []  # what the stopped fetch left went before the fetch
        assert source.requests == ["/mini.tar.gz"] * 2


@needs_podman
def test_a_container_finds_its_dataset_read_only_at_its_mountpath(data_world, image: str) -> None:
    world = data_world
    job_id = submit(world, f"""
name: contained
image: {image}
datasets: [{{name: corpus, mountPath: /data/corpus}}]
taskRoles:
  main:
    resourcePerInstance: {{cpu: 1, memoryMB: 256}}
    commands:
      - cat /data/corpus/words.txt; echo "at $TRAINYARD_DATASET_CORPUS"
      - touch /data/corpus/mine 2>/dev/null || echo refused
""")
    assert drive(world, job_id, timeout=90).state == "SUCCEEDED"
    [task] = _tasks(world, job_id)
    assert _log(world, task, 3) == ["hello", "at /data/corpus", "refused"]


# -- the node's side alone, in process (no cluster): what the task runner runs as root ------


def test_the_nodes_step_refuses_another_nodes_plan_and_a_cache_folder_others_may_write(
        tmp_path, monkeypatch, capsys) -> None:
    """A plan is run only on its node; a cache folder that someone else could write (made
    first by a user, or opened up), or one inside another account's folder, is refused
    before root writes there; otherwise the entry is fetched, in use while the runner
    lives, released after, and reported."""
    storage = tmp_path / "storage"
    (storage / "corpus").mkdir(parents=True)
    (storage / "corpus" / "words.txt").write_text("hello\n")
    datasets = SlurmDatasets(tmp_path / "state", SlurmCommands(), partition=None, name_prefix="t",
                             usable_nodes=list, cache=(tmp_path / "state" / "datasets" / "cache", None))
    fetch = DatasetFetch("corpus", str(storage / "corpus"), "1", "/data/corpus", storage_root=str(storage),
                         reader="alice")
    task = tmp_path / "task"
    task.mkdir()
    (task / PLAN).write_text(json.dumps(datasets.plan("n1", [fetch])))
    argv = ["dataset-step.py", "fetch", str(task), str(os.getpid())]
    monkeypatch.setenv("SLURMD_NODENAME", "n2")
    assert datasetstep.main(argv) == 1
    assert "the datasets' plan is for node n1, and this is node n2" in capsys.readouterr().err
    assert not datasets.root("n1").exists()
    monkeypatch.setenv("SLURMD_NODENAME", "n1")
    datasets.root("n1").mkdir(parents=True, mode=0o777)
    datasets.root("n1").chmod(0o777)
    assert datasetstep.main(argv) == 1
    assert "is not a folder of this account's that only it may write" in capsys.readouterr().err
    assert list(datasets.root("n1").iterdir()) == []
    datasets.root("n1").chmod(0o700)
    assert datasetstep.main(argv) == 0
    assert (datasets.root("n1") / "entries" / fetch.key / "words.txt").read_text() == "hello\n"
    [cache] = datasets.dataset_caches()
    assert (cache.node, cache.misses, [e.in_use for e in cache.entries]) == ("n1", 1, [1])  # this process: alive
    assert datasetstep.main(["dataset-step.py", "release", str(task), str(os.getpid())]) == 0
    [cache] = datasets.dataset_caches()
    assert [e.in_use for e in cache.entries] == [0]
    # A dataset_cache_dir in a folder another account made first (on a shared disk) is refused too.
    shared = tmp_path / "scratch"
    shared.mkdir(mode=0o755)
    os.chown(shared, 65534, 65534)
    elsewhere = SlurmDatasets(tmp_path / "state2", SlurmCommands(), partition=None, name_prefix="t",
                              usable_nodes=list, cache=(shared / "trainyard", None))
    (task / PLAN).write_text(json.dumps(elsewhere.plan("n1", [fetch])))
    assert datasetstep.main(argv) == 1
    assert f"lies in {shared}, which another account may change" in capsys.readouterr().err
    assert list(shared.iterdir()) == []  # refused before anything was made there


def test_each_nodes_cache_is_on_its_own_disk_by_default_where_root_runs_its_steps_and_doctor_warns_of_shared_ones(
        tmp_path) -> None:
    state = tmp_path / "state"
    assert cache_base(state, None, as_root=True) == Path("/var/cache/trainyard/datasets")
    assert cache_base(state, None, as_root=False) == state / "datasets" / "cache"  # no other folder is the server's
    assert cache_base(state, tmp_path / "nvme", as_root=True) == tmp_path / "nvme"
    found = check_dataset_caches(state, None, as_root=False)
    assert found.status == Status.WARN and f"in the state directory {state}, which every node shares" in found.detail
    assert "set dataset_cache_dir to a folder on each node's own disk" in found.fix
    assert check_dataset_caches(state, None, as_root=True).status == Status.OK
    assert check_dataset_caches(state, state / "datasets" / "fast", as_root=True).status == Status.WARN
