"""What datasets add to a Slurm task's start and end on its node (issue 35): the task runner's
``dataset-step.py fetch`` before the task (a miss: the fetch; a hit: the cache's lock, the
use record, the eviction scan, the node's report) and ``release`` after it, each a process
of the node's ``python3 -I -S`` with the cache's private copy, as the runner runs them.

No Slurm: the node's side alone, on this machine, from the files the backend installs
(``slurm.datasets.node_files``) and a plan as the server writes it, for a storage folder of
``--mb`` MiB. For reference, the bare ``python3 -I -S -c pass`` every such step pays at least.
Wall and CPU (the child's user + system) seconds per step; best and median of ``--runs``.
Never asserts.

Run:  python benchmarks/bench_slurm_datasets.py [--mb 64] [--runs 10]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from trainyard.backends.base import DatasetFetch
from trainyard.backends.slurm.commands import SlurmCommands
from trainyard.backends.slurm.datasets import NODE_STEP, SlurmDatasets, node_files

PYTHON = "/usr/bin/python3"


def timed(argv: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def show(name: str, samples: list[tuple[float, float]]) -> None:
    walls, cpus = [s[0] for s in samples], [s[1] for s in samples]
    print(f"{name:<28} wall best {min(walls):.3f} s median {statistics.median(walls):.3f} s | "
          f"cpu best {min(cpus):.3f} s median {statistics.median(cpus):.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=64)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        state = Path(tmp) / "state"
        for path, text in node_files(state / "bin").items():
            path.write_text(text)
        storage = Path(tmp) / "storage"
        (storage / "corpus").mkdir(parents=True)
        for index in range(args.mb):
            (storage / "corpus" / f"shard-{index:04d}").write_bytes(os.urandom(1 << 20))
        datasets = SlurmDatasets(state, SlurmCommands(), partition=None, name_prefix="bench",
                                 usable_nodes=list, cache=(state / "datasets" / "cache", 4 * args.mb << 20))
        step = str(state / "bin" / NODE_STEP)
        bare, misses, hits, releases = [], [], [], []
        for run in range(args.runs):
            task = Path(tmp) / f"task-{run}"
            task.mkdir()
            fetch = DatasetFetch("corpus", str(storage / "corpus"), f"v{run}", "/data/corpus",
                                 storage_root=str(storage), reader="bench")
            plan = datasets.plan("bench-node", [fetch])
            (task / "datasets.json").write_text(json.dumps(plan))
            bare.append(timed([PYTHON, "-I", "-S", "-c", "pass"]))
            misses.append(timed([PYTHON, "-I", "-S", step, "fetch", str(task), str(os.getpid())]))
            hits.append(timed([PYTHON, "-I", "-S", step, "fetch", str(task), str(os.getpid())]))
            releases.append(timed([PYTHON, "-I", "-S", step, "release", str(task), str(os.getpid())]))
        print(f"{args.mb} MiB storage folder, {args.runs} runs (a new version each: its first fetch misses)")
        show("python3 -I -S (reference)", bare)
        show(f"fetch, a miss ({args.mb} MiB)", misses)
        show("fetch, a hit", hits)
        show("release", releases)


if __name__ == "__main__":
    main()
