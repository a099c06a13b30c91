"""Datasets fetched ahead of the jobs that will read them (issue 35): the jobs next in line
in their VC's queue (``pending_position`` at most ``ahead``, as the last cycle wrote it) have
their datasets fetched into the nodes' caches while they wait, so that they start without
waiting for their data; the nodes that then hold all of a job's datasets are its
``PendingJob.data_nodes``, which placement prefers among nodes that fit alike. On a
one-node backend that node is where they will run; a multi-node backend with caches (none
yet) would be asked for every node, or for the node the scheduler reserves once it says
which.

A ``Periodic``: the slow part, the fetch, runs in its own thread, outside any transaction,
never holding up scheduling. A prefetched entry is mounted by no task: the cache may evict
it before the job starts, whose task then fetches it again."""

from __future__ import annotations

import logging

from trainyard.backends.base import DatasetCaches, DatasetFetch
from trainyard.controller.periodic import Periodic
from trainyard.core.clock import Clock
from trainyard.services.datasets import DatasetUnavailable, task_datasets
from trainyard.services.specs import StoredSpecs
from trainyard.store.db import Database
from trainyard.store.queries import datasets as dataset_queries

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

    def prefetch(self) -> list[DatasetFetch]:
        """Fetch what ``wanted`` names, each version once (outside the transaction), then
        note which nodes hold all of each job's (``data_nodes``, which the next cycle's
        placement prefers among nodes that fit alike); what was asked for."""
        wanted = self.wanted()
        datasets = list({d.key: d for fetches in wanted.values() for d in fetches}.values())
        if datasets:
            self.backend.prefetch(datasets)
        holding: dict[str, set[str]] = {}
        if wanted:
            for cache in self.backend.dataset_caches():
                for entry in cache.entries:
                    holding.setdefault(entry.key, set()).add(cache.node)
        found = {}
        for job_id, fetches in wanted.items():
            nodes = set.intersection(*(holding.get(d.key, set()) for d in fetches)) if fetches else set()
            if nodes:
                found[job_id] = frozenset(nodes)
        self.data_nodes = found  # replaced whole: the controller's thread reads it
        return datasets
