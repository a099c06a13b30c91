"""What a container costs a task: launch to end of a task that runs ``true``, as a bare
process and in a Podman container of the test image (``scripts/dev-image.sh``), on the
local backend; and the container with a memory limit (its own cgroup, for OOM kills).

In process, no server or controller: ``LocalBackend.launch`` then ``observe`` until the
task has ended (polled every 10 ms), ``--runs`` times each, one task at a time. Prints
p50 and max per kind and the container's ratio to the bare process. Never asserts.
Needs root and Podman.

Run:  python benchmarks/bench_container_start.py [--runs 10] [--image localhost/trainyard-test:bookworm]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from trainyard.backends.base import TaskKey, TaskLaunch
from trainyard.backends.containers import ContainerEngine
from trainyard.backends.local.backend import LocalBackend


def one_run(backend: LocalBackend, key: TaskKey, image: str | None, memory_mb: int) -> float:
    started = time.perf_counter()
    backend.launch(TaskLaunch(key, backend.inventory()[0].name, "true\n", {}, image=image, memory_mb=memory_mb))
    while True:
        status = backend.observe([key])[key]
        if not status.running:
            assert status.exit_code == 0, (status, backend.read_log(key).data)
            return time.perf_counter() - started
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--image", default="localhost/trainyard-test:bookworm")
    args = parser.parse_args()
    engine = ContainerEngine.find("podman", "runc")
    if engine is None:
        raise SystemExit("podman is not installed")
    backend = LocalBackend(Path(tempfile.mkdtemp()) / "state", gpus=[], containers=engine)
    kinds = (("bare process", None, 0), ("container", args.image, 0), ("container + memory cgroup", args.image, 512))
    results: dict[str, list[float]] = {}
    job = 0
    for name, image, memory in kinds:
        times = []
        for _ in range(args.runs):
            job += 1
            times.append(one_run(backend, TaskKey(job, 0, "m", 0), image, memory))
        results[name] = times
    bare = statistics.median(results["bare process"])
    print(f"launch to end of `true`, {args.runs} runs each")
    for name, times in results.items():
        p50 = statistics.median(times)
        print(f"  {name:28s} p50 {p50 * 1000:7.0f} ms   max {max(times) * 1000:7.0f} ms   x{p50 / bare:5.1f}")


if __name__ == "__main__":
    main()
