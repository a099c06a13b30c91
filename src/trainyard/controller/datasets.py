"""Datasets fetched ahead of the jobs that will read them (issue 35): the jobs next in line
in their VC's queue (``pending_position`` at most ``ahead``, as the last cycle wrote it) have
their datasets fetched into the nodes' caches while they wait, so that they start without
waiting for their data; the nodes that then hold all of a job's datasets are its
``PendingJob.data_nodes``, which placement prefers among nodes that fit alike. A job just
submitted gets them too, from the caches as the last run found them (``arriving``, at the
cycle that first sees it: most jobs start in that cycle, before any run could look; the
simulator measured the difference, docs/benchmarks.md). Where the
scheduler holds a reservation for a job (backfill's, for the first waiting job of a queue:
``KeepWaiting.reserved_nodes``, as the last cycle decided), its datasets are fetched to
those nodes, where it will likely run; a job next in line without one has them fetched to
every node (``DatasetCaches.prefetch(node=None)``: the local backend's one node, each
usable Slurm node).

A ``Periodic``: the slow part, the fetch, runs in its own thread, outside any transaction,
never holding up scheduling. A prefetched entry is mounted by no task: the cache may evict
it before the job starts, whose task then fetches it again."""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session

from trainyard.backends.base import DatasetCaches, DatasetFetch
from trainyard.controller.periodic import Periodic
from trainyard.core.clock import Clock
from trainyard.services.datasets import DatasetUnavailable, task_datasets
from trainyard.services.specs import StoredSpecs
from trainyard.spec.models import JobSpec
from trainyard.store.db import Database
from trainyard.store.queries import datasets as dataset_queries
from trainyard.store.queries import users as user_queries

log = logging.getLogger(__name__)
PREFETCH_INTERVAL_SECONDS = 10.0
PREFETCH_AHEAD = 2  # the first two waiting jobs of each VC


class DatasetPrefetcher(Periodic):
    thread_name = "trainyard-dataset-prefetch"

    def __init__(self, db: Database, backend: DatasetCaches, clock: Clock, specs: StoredSpecs, *,
                 interval: float = PREFETCH_INTERVAL_SECONDS, ahead: int = PREFETCH_AHEAD) -> None:
        super().__init__(clock, interval)
        self.db, self.backend, self.specs, self.ahead = db, backend, specs, ahead
        # job id -> the nodes whose cache holds all its datasets, as the last run found them
        self.data_nodes: dict[int, frozenset[str]] = {}
        # cache key -> the nodes whose cache holds it, as the last run found them (replaced whole)
        self.holding: dict[str, frozenset[str]] = {}
        # job id -> the nodes the scheduler reserves for it, as the last cycle decided
        # (replaced whole by the controller's thread; read here)
        self.reserved: dict[int, tuple[str, ...]] = {}

    def run_logged(self) -> None:
        try:
            self.prefetch()
        except Exception:  # noqa: BLE001 - retried at the next interval
            log.exception("prefetching datasets failed")

    def wanted(self) -> dict[int, list[DatasetFetch]]:
        """The datasets of the jobs next in line, by job, as their launch would resolve them."""
        wanted: dict[int, list[DatasetFetch]] = {}
        with self.db.session() as session:
            for job in dataset_queries.jobs_next_in_line(session, self.ahead):
                spec = self.specs.of(job)
                if not spec.datasets and not any(role.datasets for role in spec.taskRoles.values()):
                    continue
                try:
                    wanted[job.id] = [d for role in spec.role_names
                                      for d in task_datasets(session, job.user, spec, role)]
                except DatasetUnavailable:
                    continue  # its launch will say so
        return wanted

    def arriving(self, session: Session, user: str, spec: JobSpec) -> frozenset[str]:
        """The nodes whose cache holds every dataset of a job the controller sees waiting for
        the first time (``WaitingJobs.load``), as the last run found them: none for a job
        without datasets, or one whose datasets its launch would refuse."""
        holding = self.holding
        if not holding or not (spec.datasets or any(role.datasets for role in spec.taskRoles.values())):
            return frozenset()
        owner = user_queries.user_named(session, user)
        if owner is None:
            return frozenset()
        try:
            keys = {d.key for role in spec.role_names for d in task_datasets(session, owner, spec, role)}
        except DatasetUnavailable:
            return frozenset()
        return frozenset.intersection(*(holding.get(key, frozenset()) for key in keys)) if keys else frozenset()

    def prefetch(self) -> dict[str | None, list[str]]:
        """Fetch what ``wanted`` names, each version once per node (outside the transaction):
        a job's to the nodes reserved for it, else to every node (None); then note which
        nodes hold all of each job's (``data_nodes``, which the next cycle's placement
        prefers among nodes that fit alike). The names asked for, by node."""
        wanted = self.wanted()
        reserved = self.reserved
        by_node: dict[str | None, dict[str, DatasetFetch]] = {}
        for job_id, fetches in wanted.items():
            for node in reserved.get(job_id) or (None,):
                by_node.setdefault(node, {}).update((d.key, d) for d in fetches)
        for node, datasets in by_node.items():
            self.backend.prefetch(list(datasets.values()), node)
        holding: dict[str, set[str]] = {}
        for cache in self.backend.dataset_caches():  # also for the jobs to come (``arriving``)
            for entry in cache.entries:
                holding.setdefault(entry.key, set()).add(cache.node)
        self.holding = {key: frozenset(nodes) for key, nodes in holding.items()}  # replaced whole
        found = {}
        for job_id, fetches in wanted.items():
            nodes = set.intersection(*(holding.get(d.key, set()) for d in fetches)) if fetches else set()
            if nodes:
                found[job_id] = frozenset(nodes)
        self.data_nodes = found  # replaced whole: the controller's thread reads it
        return {node: sorted(d.name for d in datasets.values()) for node, datasets in by_node.items()}
