"""How long a suspension takes to reach a task and end it, on the local backend and (with
``--slurm``) on a Slurm cluster: the backends' side of ``Suspender`` (no target in the
issue; for scale, a job's suspend grace period defaults to 300 s).

In process, no server and no store: each round launches one task through the backend, a
loop on the machine's own ``/usr/bin/python3`` that imports ``trainyard.runtime`` from the
path the backend gives and checks ``should_suspend()`` every 10 ms; once it runs, the
benchmark calls ``backend.suspend`` (the request file, then SIGUSR1) and times

(a) the ``suspend`` call itself (what the controller's reconcile pass pays per task),
(b) until the task has noticed (it writes the time it saw the request to a file), and
(c) until ``observe`` reports it ended with 85 (what the controller then acts on).

Prints p50 / p90 / max per backend. Never asserts.

Run:  python benchmarks/bench_suspend.py [-n 20] [--slurm]   (--slurm needs SLURM_CONF)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import percentile  # noqa: E402

from trainyard.backends.base import SuspendRequest, TaskKey, TaskLaunch  # noqa: E402
from trainyard.backends.local.backend import LocalBackend  # noqa: E402

TASK = """trap : USR1
/usr/bin/python3 - <<'PY'
import time
from trainyard import runtime
runtime.should_suspend()
open("{ready}", "w").close()
while not runtime.should_suspend():
    time.sleep(0.01)
with open("{seen}", "w") as f:
    f.write(repr(time.time()))
runtime.suspend_done()
PY
"""


def wait_for(condition, timeout: float = 60.0, poll: float = 0.002):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := condition():
            return found
        time.sleep(poll)
    raise TimeoutError("gave up waiting")


def rounds(backend, node: str, work: Path, count: int) -> dict[str, list[float]]:
    work.mkdir()
    times: dict[str, list[float]] = {"suspend() call": [], "until the task noticed": [], "until observed, exit 85": []}
    request = SuspendRequest("benchmark", datetime.now(UTC) + timedelta(minutes=5), "SIGUSR1")
    for number in range(count):
        key = TaskKey(number + 1, 0, "main", 0)
        ready, seen = work / f"ready-{number}", work / f"seen-{number}"
        launch = TaskLaunch(key, node, TASK.format(ready=ready, seen=seen),
                            {"TRAINYARD_JOB_ID": str(key.job_id), "TRAINYARD_SUSPEND_SIGNAL": "SIGUSR1"},
                            cpu_milli=1000, memory_mb=64)
        backend.launch(launch)
        wait_for(ready.exists)
        wall, t0 = time.time(), time.perf_counter()
        backend.suspend(key, request)
        times["suspend() call"].append(time.perf_counter() - t0)
        status = wait_for(lambda key=key: (s := backend.observe([key])[key]).running is False and s)
        times["until observed, exit 85"].append(time.perf_counter() - t0)
        times["until the task noticed"].append(float(seen.read_text()) - wall)
        if status.exit_code != 85:
            print(f"  round {number}: the task ended with {status.exit_code}, not 85: {status.message}")
    return times


def report(name: str, times: dict[str, list[float]]) -> None:
    print(f"{name} ({len(next(iter(times.values())))} rounds):")
    for what, values in times.items():
        ms = [v * 1000 for v in values]
        p50, p90 = percentile(ms, 50), percentile(ms, 90)
        print(f"  {what:<26} p50 {p50:7.1f} ms   p90 {p90:7.1f} ms   max {max(ms):7.1f} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20, help="rounds per backend")
    parser.add_argument("--slurm", action="store_true", help="also on the Slurm cluster of SLURM_CONF")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-suspend-") as tmp:
        local = LocalBackend(Path(tmp) / "local", gpus=[])
        report("local backend", rounds(local, local.inventory()[0].name, Path(tmp) / "local-tasks", args.n))
        if args.slurm:
            if not os.environ.get("SLURM_CONF"):
                print("--slurm: SLURM_CONF is not set (export \"$(scripts/dev-slurm.sh start)\")")
                return 0
            from trainyard.backends.slurm.backend import SlurmBackend

            slurm = SlurmBackend(Path(tmp) / "slurm")
            node = slurm.inventory()[0].name
            report("Slurm backend", rounds(slurm, node, Path(tmp) / "slurm-tasks", args.n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
