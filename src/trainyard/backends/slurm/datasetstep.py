"""A compute node's side of the Slurm backend's dataset caches (issue 35), installed as
``<state_dir>/bin/dataset-step.py`` and run as root by the node's ``python3 -I -S``:

    dataset-step.py fetch TASK_DIR RUNNER_PID    before a task starts (``runners.TASK_RUNNER``)
    dataset-step.py release TASK_DIR RUNNER_PID  after it has ended
    dataset-step.py prefetch PLAN                a short Slurm job of its own (``slurm.datasets``)

The cache is the local backend's (``backends/datacache``, ``datafetch``: the same hostile-source
rules, the same crash-safety protocol), from a private copy beside this file
(``bin/datasets/``: standard library only). ``fetch`` makes each of the task's datasets
complete in this node's cache (one fetch per node and version: a second task waits on the
entry's lock, then hits) and records the task runner, which lives as long as the task, as a
task that mounts it: eviction skips it while the runner lives. ``release`` drops that record
at once. Each writes what the node's cache holds, its counters and live uses
(``NodeCache.read``) to the report the plan names (``<state_dir>/datasets/nodes/<node>.json``),
which the server reads for ``DatasetCaches``: the server never reads a node's cache itself,
whose use records name processes of the node.

The plan (``TASK_DIR/datasets.json`` or the prefetch's PLAN) is the server's, root's 0600:
the node it is for (checked against Slurm's ``SLURMD_NODENAME``: a node never takes another's
cache), its cache's root, capacity and limits, and each dataset (``mounts.fetch_plan``).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

USAGE = "usage: dataset-step.py fetch|release TASK_DIR RUNNER_PID | prefetch PLAN"
PLAN = "datasets.json"  # in a task's directory


def _cache(plan: dict[str, Any]) -> Any:
    from trainyard.backends import datacache

    return datacache.NodeCache(plan["root"], int(plan["capacity"]), timeout=float(plan["timeout"]),
                               allowed_hosts=tuple(plan["allowed_hosts"]))


def _read_plan(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        plan: dict[str, Any] = json.load(f)
    node = os.environ.get("SLURMD_NODENAME")
    if node and node != plan["node"]:
        raise ValueError(f"the datasets' plan is for node {plan['node']}, and this is node {node}")
    return plan


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def fetch(task_dir: str, runner: int) -> int:
    """Each of the task's datasets complete in this node's cache, used by ``runner``; 1 when
    one cannot be, saying why in the task's log and in ``datacache.FAILED`` (its status's message)."""
    node = os.environ.get("SLURMD_NODENAME") or ""
    try:
        plan = _read_plan(os.path.join(task_dir, PLAN))
        cache = _cache(plan)
        try:
            for item in plan["items"]:
                cache.ensure(item, say=_say, pid=runner)
        finally:
            _report_quietly(cache, plan)
    except Exception as exc:  # noqa: BLE001 - hostile or broken sources: said; the task is not started
        from trainyard.backends import datacache

        _say(f"trainyard: {datacache.record_failure(task_dir, exc, node)}")
        return 1
    return 0


def release(task_dir: str, runner: int) -> int:
    """The task has ended: its runner no longer uses its datasets."""
    plan = _read_plan(os.path.join(task_dir, PLAN))
    cache = _cache(plan)
    cache.release([item["key"] for item in plan["items"]], runner)
    _report_quietly(cache, plan)
    return 0


def prefetch(path: str) -> int:
    """Each dataset of the plan into this node's cache, used by no task yet; each problem
    on a line of its own (a prefetch never fails a job: its task fetches again)."""
    plan = _read_plan(path)
    cache = _cache(plan)
    for item in plan["items"]:
        try:
            cache.ensure(item, use=False)
        except Exception as exc:  # noqa: BLE001 - hostile or broken sources: said, then the task's turn
            print(json.dumps(f"dataset {item['name']} (version {item['version']}): {exc}"), flush=True)
    _report_quietly(cache, plan)
    return 0


def _report_quietly(cache: Any, plan: dict[str, Any]) -> None:
    try:
        cache.write_report(plan["report"], node=plan["node"])
    except (OSError, ValueError) as exc:  # the task's data is there; only the server's view lags
        _say(f"trainyard: could not write this node's dataset cache report: {exc}")


def main(argv: list[str]) -> int:
    try:
        if len(argv) == 4 and argv[1] in ("fetch", "release") and argv[3].isdigit():
            return (fetch if argv[1] == "fetch" else release)(argv[2], int(argv[3]))
        if len(argv) == 3 and argv[1] == "prefetch":
            return prefetch(argv[2])
    except Exception as exc:  # noqa: BLE001 - said in the task's log; the task is not started
        _say(f"trainyard: cannot make the task's datasets ready on this node: {exc}")
        return 1
    _say(USAGE)
    return 2


if __name__ == "__main__":
    # The cache's code: the private copy beside this file (``-I -S``: nothing else is on the path).
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "datasets"))
    sys.exit(main(sys.argv))
