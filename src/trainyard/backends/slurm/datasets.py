"""The Slurm backend's dataset caches (``base.DatasetCaches``, issue 35): each compute node
keeps its own, at ``<dataset_cache_dir>/<node>`` (``cache_base``: by default on the node's
own disk, ``/var/cache/trainyard/datasets/<node>``, where the nodes' steps run as root; else
``<state_dir>/datasets/cache/<node>``, on the shared state directory, which ``yard doctor``
warns of).

- A task's datasets: the server writes ``TASK_DIR/datasets.json`` (root's, 0600: the task's
  node, its cache, each dataset with its reader, ``mounts.fetch_plan``); the task runner has
  ``dataset-step.py fetch`` (``datasetstep``, as root, with a private copy of the cache's code)
  make each complete in the node's cache before the task starts, then the task finds each
  read-only at its mountPath (its sandbox binds the entry; a container mounts it), or, as a
  bare process, at ``$TRAINYARD_DATASET_<NAME>`` (the entry itself).
- What each node's cache holds: ``<state_dir>/datasets/nodes/<node>.json``, written by the
  node's own steps after each fetch, release and prefetch, read here (``dataset_caches``):
  as the task sampler's figures reach the server, through the shared state directory.
  A node's report is as of its last step (a task killed before its runner could release its
  datasets still counts as a use there until the node's next step).
- ``prefetch``: a short Slurm job on each node (as the image cache's, ``images``), one CPU.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from trainyard.backends.base import DatasetFetch, Mount, NodeDatasetCache, TaskLaunch
from trainyard.backends.datacache import DEFAULT_CAPACITY_BYTES, DEFAULT_FETCH_TIMEOUT_SECONDS, NodeCache
from trainyard.backends.mounts import cache_report, fetch_plan
from trainyard.backends.slurm.commands import SlurmCommands, SlurmError
from trainyard.backends.slurm.datasetstep import PLAN
from trainyard.backends.slurm.images import _NODE_NAME
from trainyard.spec.datasets import dataset_variable

log = logging.getLogger(__name__)

NODE_STEP = "dataset-step.py"  # in <state_dir>/bin, beside the task runner
# Each node's cache without dataset_cache_dir where the nodes' steps run as root: the node's
# own disk, in the place the FHS keeps for what an application can fetch again (JuiceFS's
# /var/jfsCache, FS-Cache's /var/cache/fscache alike); made by root on the node at its first
# fetch, 0755 folders root's alone (``NodeCache.make_dirs``).
NODE_LOCAL_CACHE = Path("/var/cache/trainyard/datasets")
SHARED_FILE_SYSTEMS = ("nfs", "nfs4", "lustre", "gpfs", "ceph", "cifs", "smb3", "beegfs", "glusterfs",
                       "fuse.glusterfs", "fuse.juicefs", "fuse.sshfs", "fuse.s3fs", "fuse.gcsfuse")
PRIVATE_COPY = "datasets"  # <state_dir>/bin/datasets/: the cache's code the node's python3 imports
STEP_MEMORY_MB = 512
STEPS_AT_ONCE = 8


class SlurmDatasets:
    """The nodes' dataset caches of a Slurm backend whose state is ``state_dir``."""

    def __init__(self, state_dir: Path, commands: SlurmCommands, *, partition: str | None, name_prefix: str,
                 usable_nodes: Callable[[], list[str]], cache: tuple[Path | None, int | None] = (None, None),
                 sources: tuple[float, Sequence[str]] | None = None,
                 reader_of: Callable[[str], tuple[int, list[int]] | None] = lambda _: None,
                 node_python: str = "/usr/bin/python3", install: Callable[[Path, str], object] | None = None) -> None:
        """``cache``: where (``dataset_cache_dir``) and how big (bytes) each node's is;
        ``sources``: a fetch's time in all, and the hosts allowed (``dataset_allowed_hosts``;
        None: the defaults); ``install`` writes the nodes' files (``node_files``) into the
        state directory's ``bin``."""
        sources = sources or (DEFAULT_FETCH_TIMEOUT_SECONDS, ())
        self.state_dir = state_dir
        self.base = cache_base(state_dir, cache[0], as_root=os.geteuid() == 0)
        if (why := shared_cache(state_dir, self.base)) is not None:
            log.warning("each Slurm node's dataset cache is %s/<node>: %s; set dataset_cache_dir to a folder on "
                        "each node's own disk (`yard doctor` checks it)", self.base, why)
        self.capacity = DEFAULT_CAPACITY_BYTES if cache[1] is None else cache[1]
        self.timeout, self.allowed_hosts = sources[0], tuple(sources[1])
        self.reports = state_dir / "datasets" / "nodes"
        self.reports.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.commands, self.partition, self.name_prefix = commands, partition, name_prefix
        self._usable_nodes = usable_nodes
        self.node_python = node_python
        self.step = state_dir / "bin" / NODE_STEP
        if install is not None:
            for path, text in node_files(state_dir / "bin").items():
                install(path, text)
        # A storage folder's reader (a Trainyard user) as the (uid, groups) its copy honours.
        self.reader_of = reader_of

    def root(self, node: str) -> Path:
        """Node ``node``'s cache (ValueError for a name unfit for a path)."""
        if not _NODE_NAME.fullmatch(node):
            raise ValueError(f"node {node!r}: a name unfit for a path; its dataset cache cannot be named")
        return self.base / node

    # -- a task's datasets ----------------------------------------------------------------

    def mounts(self, task: TaskLaunch, *, pyxis: bool = False) -> tuple[Mount, ...]:
        """Each of the task's datasets: its entry in its node's cache, read-only at its
        mountPath (ValueError where the task runner cannot fetch them: Pyxis runs it in the image)."""
        if task.datasets and pyxis and task.image is not None:
            raise ValueError("datasets are fetched by Trainyard's task runner on the node, which Pyxis runs inside "
                             "the image: with slurm_pyxis, run the job without an image, or use container_engine "
                             "(podman on the nodes)")
        entries = self.root(task.node) / "entries"
        return tuple(Mount(str(entries / d.key), d.target, True, d.name, 0, str(entries / d.key))
                     for d in task.datasets)

    def env(self, task: TaskLaunch, *, inside: bool) -> dict[str, str]:
        """``$TRAINYARD_DATASET_<NAME>``: the mountPath in a sandbox or container, else the entry."""
        return {dataset_variable(m.name): m.target if inside else m.source for m in self.mounts(task)}

    def plan(self, node: str, datasets: Sequence[DatasetFetch]) -> dict[str, Any]:
        """What ``dataset-step.py`` does on ``node``: ``datasets.json``, or a prefetch's plan."""
        cache = NodeCache(self.root(node), self.capacity, timeout=self.timeout, allowed_hosts=self.allowed_hosts)
        return {**fetch_plan(cache, datasets, self.reader_of), "node": node,
                "report": str(self.reports / f"{node}.json")}

    def prepare(self, task: TaskLaunch, task_dir: Path, *, pyxis: bool,
                inside: bool) -> tuple[tuple[Mount, ...], dict[str, str]]:
        """The task's dataset mounts and variables (``inside``: a sandbox or a container), its
        ``datasets.json`` written for the task runner where it reads any."""
        mounts = self.mounts(task, pyxis=pyxis)
        if task.datasets:
            from trainyard.backends.slurm.submission import write_private

            task_dir.mkdir(parents=True, exist_ok=True)
            write_private(task_dir / PLAN, json.dumps(self.plan(task.node, task.datasets)).encode())
        return mounts, self.env(task, inside=inside)

    # -- DatasetCaches ----------------------------------------------------------------------

    def dataset_caches(self) -> list[NodeDatasetCache]:
        """Each node's cache as its last step reported it (nodes whose tasks never read a
        dataset have none yet)."""
        caches = []
        for path in sorted(self.reports.glob("*.json")):
            node = path.name[:-len(".json")]
            if not _NODE_NAME.fullmatch(node):
                continue
            try:
                caches.append(cache_report(node, json.loads(path.read_text())))
            except (OSError, KeyError, TypeError, ValueError) as exc:
                log.warning("node %s's dataset cache report cannot be read: %s", node, exc)
        return caches

    def prefetch(self, datasets: Sequence[DatasetFetch], node: str | None = None) -> None:
        """On ``node`` (None: every node Slurm would start work on), a short Slurm job that
        fetches into its cache those of ``datasets`` its last report does not list; problems
        are logged."""
        held = {c.node: {e.key for e in c.entries} for c in self.dataset_caches()}
        # Only what a node's last report does not hold: the controller asks every 10 s, and
        # each ask would otherwise be a Slurm job on every node.
        wanted = {n: missing for n in ([node] if node is not None else self._usable_nodes())
                  if (missing := [d for d in datasets if d.key not in held.get(n, set())])}
        if not wanted:
            return
        with ThreadPoolExecutor(max_workers=min(len(wanted), STEPS_AT_ONCE)) as pool:
            answers = pool.map(lambda n: self._prefetch_on(n, wanted[n]), wanted)
            for name, problems in zip(wanted, answers, strict=True):
                for problem in problems:
                    log.warning("prefetching datasets on node %s: %s", name, problem)

    def _prefetch_on(self, node: str, datasets: Sequence[DatasetFetch]) -> list[str]:
        try:
            plan = self.plan(node, datasets)
        except ValueError as exc:
            return [str(exc)]
        folder = self.state_dir / "datasets" / "prefetch"
        folder.mkdir(exist_ok=True, mode=0o700)
        path = folder / f"{node}-{secrets.token_hex(8)}.json"
        from trainyard.backends.slurm.submission import write_private

        write_private(path, json.dumps(plan).encode())
        srun = ["srun", f"--job-name={self.name_prefix}-datasets", f"--nodelist={node}", "--nodes=1", "--ntasks=1",
                "--cpus-per-task=1", f"--mem={STEP_MEMORY_MB}", "--export=NONE", "--quiet"]
        if self.partition is not None:
            srun.append(f"--partition={self.partition}")
        srun += ["/usr/bin/env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin", self.node_python, "-I", "-S",
                 str(self.step), "prefetch", str(path)]
        try:
            done = self.commands.run(srun, check=False, timeout=self.timeout + 60)
        except SlurmError as exc:
            return [str(exc)]
        finally:
            path.unlink(missing_ok=True)
        problems = []
        for line in done.stdout.splitlines():
            try:
                problems.append(str(json.loads(line)))
            except ValueError:
                problems.append(line[:500])
        if done.returncode != 0:
            problems.append(done.stderr.strip()[-500:] or f"exit {done.returncode}")
        return problems


def cache_base(state_dir: Path, configured: Path | None, *, as_root: bool) -> Path:
    """Where the nodes' caches are, each at ``<this>/<node>`` (the node's name keeps them apart
    where nodes share a file system): ``dataset_cache_dir`` where set; else the node's own
    disk (``NODE_LOCAL_CACHE``) when the server, and so the nodes' steps, run as root; else
    the state directory, which every node shares (a non-root account may make no folder in
    /var/cache: ``yard doctor`` warns, ``shared_cache``)."""
    if configured is not None:
        return Path(configured).absolute()
    return NODE_LOCAL_CACHE if as_root else state_dir / "datasets" / "cache"


def shared_cache(state_dir: Path, base: Path) -> str | None:
    """Why the nodes' caches at ``base`` are not on their own disks, as far as this machine
    can tell (None: they may be): inside the state directory, which every node reads, or
    on a network file system here (the nearest existing folder's mount)."""
    state, where = Path(os.path.realpath(state_dir)), Path(os.path.realpath(base))
    if where == state or state in where.parents:
        return f"{base} is in the state directory {state_dir}, which every node shares"
    try:
        with open("/proc/self/mounts", encoding="utf-8") as f:
            mounts = [line.split()[1:3] for line in f if len(line.split()) >= 3]
    except OSError:
        return None
    point, kind = max(((m, k) for m, k in mounts if where == Path(m) or Path(m) in where.parents),
                      key=lambda mount: len(mount[0]), default=("/", ""))
    if kind in SHARED_FILE_SYSTEMS:
        return f"{base} is on {point}, a {kind} file system (shared storage, as far as this machine can tell)"
    return None


def node_files(bin_dir: Path) -> dict[Path, str]:
    """What the nodes run for datasets, by path under ``bin_dir``: ``dataset-step.py``
    (``datasetstep``) and ``datasets/``, the cache's modules (standard library only) where
    their names put them, each package's ``__init__.py`` empty. Folders made here."""
    from trainyard.backends import datacache, datafetch
    from trainyard.backends.slurm import datasetstep
    from trainyard.core import addresses, workdirs

    files: dict[Path, str] = {}
    for module in (datacache, datafetch, addresses, workdirs):
        assert module.__file__ is not None
        parts = module.__name__.split(".")
        for depth in range(1, len(parts)):
            files[bin_dir / PRIVATE_COPY / Path(*parts[:depth]) / "__init__.py"] = ""
        files[bin_dir / PRIVATE_COPY / Path(*parts[:-1]) / Path(module.__file__).name] = \
            Path(module.__file__).read_text()
    for path in files:
        path.parent.mkdir(parents=True, exist_ok=True)
    assert datasetstep.__file__ is not None
    return {bin_dir / NODE_STEP: Path(datasetstep.__file__).read_text(), **files}
