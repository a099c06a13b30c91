"""What one suspension of a real training loop costs, and that it loses nothing (issue 16).

Starts a real ``yard up --local-gpus 1`` (temporary home, SQLite, tasks under the server's
own account so that they can run this Python) and runs ``examples/suspend-resume/job.yaml``
with each trainer (``train_numpy.py``; ``train_torch.py`` when PyTorch is installed): once
uninterrupted, then again suspended ``--suspensions`` times through the SDK (``yard suspend``,
each once it has trained ``--every`` more steps) and resumed (``yard resume``). For each
suspension it prints

* save: from the suspend request to the job SUSPENDED (its task saved its checkpoint and
  exited 85, and the controller noticed);
* restore: from the resume request to the first step after the checkpoint (placement,
  launch, the interpreter and its imports, loading the checkpoint, one step);

their sum against the 120 s per suspension that ``yard sim`` charges by default
(``sim/queue.py``'s ``SUSPEND_COST``, for checkpoints of real models), the wall time of both
runs, and whether the interrupted run's final loss and parameter hash equal the
uninterrupted run's. Never asserts.

Run:  python benchmarks/bench_suspend_resume.py [--steps 600] [--step-seconds 0.02]
          [--suspensions 3] [--every 100] [--only numpy|torch]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import yaml  # noqa: E402
from common import REPO, ratio_line, yard_server  # noqa: E402

EXAMPLE = REPO / "examples" / "suspend-resume"
SIMULATED_SUSPEND_COST_S = 120.0  # trainyard.sim.queue.SUSPEND_COST


def job_text(trainer: str, steps: int, step_seconds: float) -> str:
    job = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    job["parameters"] |= {"exampleDir": str(EXAMPLE), "trainer": trainer, "python": sys.executable,
                          "steps": steps, "stepSeconds": step_seconds}
    return yaml.safe_dump(job)


def job_dir(home: Path, job_id: int) -> Path:
    found = sorted(home.glob(f"local/**/tasks/{job_id}/jobdir"))
    if not found:
        raise RuntimeError(f"no job directory for job {job_id} under {home}")
    return found[0]


def progress(home: Path, job_id: int) -> int:
    try:
        return int((job_dir(home, job_id) / "progress").read_text())
    except (RuntimeError, FileNotFoundError, ValueError):
        return 0


def wait_for(condition, timeout: float, what: str, poll: float = 0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(poll)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")


def run_trainer(server, trainer: str, args: argparse.Namespace) -> None:
    client, home = server.client, server.home
    print(f"\n== {trainer}: {args.steps} steps; {args.suspensions} suspensions, every {args.every} steps")
    started = time.perf_counter()
    reference = client.wait(client.submit(job_text(trainer, args.steps, 0)).id, timeout=600)
    plain_s = time.perf_counter() - started
    expected = json.loads((job_dir(home, reference.id) / "result.json").read_text())
    print(f"uninterrupted (no sleep per step): {reference.state} in {plain_s:.1f} s; "
          f"loss {expected['loss']}, sha256 {expected['sha256'][:16]}…")

    started = time.perf_counter()
    job_id = client.submit(job_text(trainer, args.steps, args.step_seconds)).id
    saves, restores = [], []
    for _ in range(args.suspensions):
        reached = wait_for(lambda: progress(home, job_id), 300, f"job {job_id} to train")
        wait_for(lambda reached=reached: progress(home, job_id) >= reached + args.every, 300,
                 f"job {job_id} to train on")
        asked = time.perf_counter()
        client.suspend(job_id)
        wait_for(lambda: client.job(job_id).state == "SUSPENDED", 300, f"job {job_id} suspended", poll=0.005)
        saves.append(time.perf_counter() - asked)
        saved = progress(home, job_id)
        asked = time.perf_counter()
        client.resume(job_id)
        wait_for(lambda saved=saved: progress(home, job_id) > saved, 300, f"job {job_id} to go on", poll=0.005)
        restores.append(time.perf_counter() - asked)
    job = client.wait(job_id, timeout=600)
    interrupted_s = time.perf_counter() - started
    got = json.loads((job_dir(home, job_id) / "result.json").read_text())
    segments = ", ".join(f"{s['from']}-{s['to']}" for s in got["segments"])
    print(f"interrupted: {job.state} in {interrupted_s:.1f} s (the sleeps alone: "
          f"{args.steps * args.step_seconds:.1f} s); attempts {' '.join(str(a.state) for a in job.attempts)}, "
          f"retries used {job.retriesUsed}; steps per attempt {segments}")
    same = (got["loss"], got["sha256"]) == (expected["loss"], expected["sha256"])
    print(f"final loss {got['loss']}, sha256 {got['sha256'][:16]}…: "
          f"{'EQUAL, bit for bit,' if same else 'DIFFERENT from'} the uninterrupted run's")
    print("save    (suspend → SUSPENDED), s: " + "  ".join(f"{s:.2f}" for s in saves))
    print("restore (resume → next step), s:  " + "  ".join(f"{s:.2f}" for s in restores))
    cost = statistics.median(saves) + statistics.median(restores)
    print(ratio_line("one suspension, median save + restore", cost, SIMULATED_SUSPEND_COST_S,
                     lower_is_better=True, unit="s"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--step-seconds", type=float, default=0.02)
    parser.add_argument("--suspensions", type=int, default=3)
    parser.add_argument("--every", type=int, default=100, help="steps trained between suspensions")
    parser.add_argument("--only", choices=["numpy", "torch"])
    args = parser.parse_args()
    trainers = ["train_numpy.py"]
    if importlib.util.find_spec("torch"):
        trainers.append("train_torch.py")
    else:
        print("PyTorch is not installed here (pip install torch==2.13.0): the NumPy loop only")
    if args.only:
        trainers = [f"train_{args.only}.py"]
    with yard_server(local_gpus=1, extra_args=["--task-accounts", "server"]) as server:
        for trainer in trainers:
            run_trainer(server, trainer, args)


if __name__ == "__main__":
    main()
