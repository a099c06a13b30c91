"""The placement test's replays (``tests/sim/test_sim_placement.py``): CPU seconds of each,
and a digest of every pod's arrived, allocated and fragmented figures.

Each ``LIST:POLICY`` replays openb's pod list at seed 42 up to 101 % arrived demand, as the
test does. Run it on two checkouts (``--src DIR``: another checkout's ``src``) to time a
change to the replay's code and check that it places every pod the same (equal digests).

    python benchmarks/bench_sim_replays.py [--src ../main] default:fgd cpu300:default ...

Without arguments: the 13 replays of the test. Prints; never asserts.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTED = ["default:" + p for p in ("fgd", "default", "random", "dotprod", "clustering", "packing", "bestfit")] + [
    f"{pods}:{p}" for pods in ("gpuspec20", "gpuspec05", "cpu300") for p in ("default", "fgd")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("replays", nargs="*", default=TESTED, help="LIST:POLICY, e.g. cpu300:default")
    parser.add_argument("--src", type=Path, default=REPO, help="the checkout whose code replays (DIR/src)")
    args = parser.parse_args()
    sys.path.insert(0, str(args.src / "src"))
    from trainyard.sim.openb import gpu_capacity, load_nodes, load_pods, seeded_names, tune, workload_of
    from trainyard.sim.placement import run_placement
    from trainyard.sim.policies import scorer_name
    from trainyard.sim.traces import OPENB_NODES, trace_file

    nodes = load_nodes(trace_file(*OPENB_NODES))
    total = 0.0
    for replay in args.replays:
        pod_list, policy = replay.split(":")
        pods = load_pods(trace_file("openb", f"openb_pod_list_{pod_list}.csv"))
        tuned = tune(pods, gpu_capacity(nodes), 1.3, 42)
        started = time.process_time()
        run = run_placement(seeded_names(nodes, 42), tuned, scorer_name(policy), workload_of(pods),
                            job_id_base=42 * 10_000_000, stop_at_pct=101)
        cpu = time.process_time() - started
        total += cpu
        figures = repr((run.arrived, run.allocated, run.fragmented, run.placed, run.failed)).encode()
        print(f"{replay:20s} {cpu:6.2f} s CPU  at 100 %: {run.curve(run.allocated)[100]:.4f}  "
              f"digest {hashlib.sha256(figures).hexdigest()[:16]}", flush=True)
    print(f"{'total':20s} {total:6.2f} s CPU")


if __name__ == "__main__":
    main()
