"""What the Slurm task sampler costs the compute node, per round (target: < 0.5 % of one core
at the default 10 s interval, since it runs beside every task).

What runs is the sampler's own round (``measure`` in ``backends/slurm/runners.TASK_SAMPLER``,
the text the backend installs as ``task-sampler.py``) in this process, over a real process
tree: a shell with ``--processes`` children, standing for a task. Two cases: a step without
GPUs, and a step holding ``--gpus`` GPUs read through ``backends/nvml_devices`` — answered
here by THE NVML stand-in (``tests/standins/nvml.py``; this machine has no driver), so the
figure is the sampler's own work per round; a real driver adds its NVML calls (seven per
device per round). The pass over ``/proc`` costs per process on the machine: their count is
printed. Prints CPU ms per round and the share of one core at ``--interval``. Never asserts.

Run:  python benchmarks/bench_task_sampler.py [--processes 8] [--gpus 8] [--rounds 300] [--interval 10]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pynvml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from standins.nvml import FakeNvml  # noqa: E402

from trainyard.backends import nvml_devices  # noqa: E402
from trainyard.backends.slurm import runners  # noqa: E402

TARGET_SHARE = 0.005


def load_sampler(interval: float) -> types.ModuleType:
    """The sampler as the backend installs it, as a module (its ``nvml_devices`` is ours)."""
    sys.modules["nvml_devices"] = nvml_devices
    module = types.ModuleType("task_sampler")
    exec(compile(runners.TASK_SAMPLER.replace("@INTERVAL@", repr(interval)), "task-sampler.py", "exec"),
         module.__dict__)
    return module


def cpu_per_round(sampler: types.ModuleType, runner: int, gpus: object, rounds: int) -> float:
    before = None
    record, before = sampler.measure(runner, os.getpid(), "bench", gpus, before)  # warm-up
    assert record is not None, "the task's tree is empty"
    started = time.process_time()
    for _ in range(rounds):
        record, before = sampler.measure(runner, os.getpid(), "bench", gpus, before)
    return (time.process_time() - started) / rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8, help="processes in the task's tree")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs of the step in the second case")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--interval", type=float, default=10.0)
    args = parser.parse_args()

    task = subprocess.Popen(["bash", "-c", f"for i in $(seq {args.processes - 1}); do sleep 600 & done; wait"],
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(Path(f"/proc/{task.pid}/task/{task.pid}/children").read_text().split()) < args.processes - 1:
            if time.monotonic() > deadline:
                raise SystemExit("the task's processes did not start")
            time.sleep(0.01)
        sampler = load_sampler(args.interval)
        machine_processes = sum(1 for name in os.listdir("/proc") if name.isdigit())
        print(f"task sampler: a tree of {args.processes} processes, {machine_processes} processes on the machine, "
              f"{args.rounds} rounds")

        no_gpus = cpu_per_round(sampler, task.pid, sampler.Gpus([]), args.rounds)
        for name, call in FakeNvml(args.gpus).calls().items():
            setattr(pynvml, name, call)
        gpus = sampler.Gpus(list(range(args.gpus)))
        assert gpus.devices is not None, "NVML (the stand-in) did not start"
        with_gpus = cpu_per_round(sampler, task.pid, gpus, args.rounds)

        for label, seconds in (("no GPUs", no_gpus), (f"{args.gpus} GPUs (NVML stand-in)", with_gpus)):
            share = seconds / args.interval
            verdict = "MEETS" if share < TARGET_SHARE else "MISSES"
            print(f"  {label:28s} {seconds * 1000:7.3f} ms CPU a round = {share * 100:.4f} % of a core "
                  f"every {args.interval:g} s (target < {TARGET_SHARE * 100:g} %, "
                  f"{share / TARGET_SHARE:.3f}x of it): {verdict}")
    finally:
        os.killpg(task.pid, signal.SIGKILL)
        task.wait()


if __name__ == "__main__":
    main()
