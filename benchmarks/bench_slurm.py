"""The Slurm backend against plain ``sbatch`` on the same cluster (target: ≤ 1.2× sbatch).

Needs a Slurm cluster: ``export "$(scripts/dev-slurm.sh start)"`` (as root) starts the
dev one. Two parts:

1. **Latency.** N rounds; each round submits one tiny job with plain ``sbatch`` and one
   through Trainyard (``POST /api/v1/jobs`` to a real ``yard up --backend slurm``), the
   order alternating, each after a random pause of up to 1 s (Slurm starts jobs on its
   own ~1 s ticks: the pause spreads both kinds over the tick). Both jobs run
   ``touch MARKER; sleep 300`` on 1 CPU and 16 MiB (plain ones off n1,n2, where Trainyard
   packs its own). For each it measures the time
   from just before the submission until (a) the job is in Slurm (sbatch returned; for
   Trainyard, its job id file appeared), (b) Slurm reports it ``RUNNING`` (``scontrol show
   job``, polled every ``--poll-ms``) and (c) the command has started (its marker file
   exists). All jobs keep running until the end, so no job ending disturbs Slurm's
   scheduling of the next. Prints means, p50/p90 and the ratios Trainyard/sbatch; the
   target is on (b).
2. **Burst.** ``--burst`` jobs submitted at once (8 threads) through Trainyard: 1 CPU,
   every 4th with a GPU, each ``sleep 0.5`` then exit 3 for every 5th job, else 0. Waits
   for all to end, then checks that every job has the state its exit code implies and
   that each ran as exactly one Slurm job. Prints the wall time and the check.

Never asserts: numbers are printed, with MEETS/MISSES for the ratio target.

Run:  python benchmarks/bench_slurm.py [-n 16] [--burst 200] [--poll-ms 10]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import percentile, ratio_line, yard_server  # noqa: E402

TARGET_RATIO = 1.2
# Trainyard's best-fit packs its probe jobs onto n1 and n2 (it does not see jobs submitted
# to Slurm behind its back); the plain sbatch jobs keep off those nodes so that neither
# side ever waits for the other's CPUs.
PLAIN_EXCLUDE = "n1,n2"


def slurm_state(job_id: str) -> str:
    out = subprocess.run(["scontrol", "show", "job", "--oneliner", job_id], capture_output=True, text=True).stdout
    for part in out.split():
        if part.startswith("JobState="):
            return part.split("=", 1)[1]
    return ""


def wait_running_and_started(job_id_of, marker: Path, t0: float, poll_s: float, timeout_s: float = 60.0):
    """Seconds from t0 until the job is in Slurm, until Slurm says RUNNING, and until the marker exists."""
    running = started = submitted = None
    job_id = None
    while time.perf_counter() - t0 < timeout_s and (running is None or started is None):
        if job_id is None:
            job_id = job_id_of()
            if job_id is not None:
                submitted = time.perf_counter() - t0
        if job_id is not None and running is None and slurm_state(job_id) in ("RUNNING", "COMPLETING", "COMPLETED"):
            running = time.perf_counter() - t0
        if started is None and marker.exists():
            started = time.perf_counter() - t0
        time.sleep(poll_s)
    return job_id, submitted, running, started


def read_job_id(path_glob: str, home: Path):
    def job_id_of():
        for path in home.glob(path_glob):
            text = path.read_text().strip()
            if text:
                return text
        return None
    return job_id_of


def latency(server, rounds: int, poll_s: float, work: Path) -> None:
    plain: dict[str, list[float]] = {"in Slurm": [], "running": [], "started": []}
    ours: dict[str, list[float]] = {"in Slurm": [], "running": [], "started": []}
    started_jobs: list[str] = []
    phase = random.Random(1)
    for i in range(rounds):
        for which in (("sbatch", "yard") if i % 2 == 0 else ("yard", "sbatch")):
            # Slurm starts jobs on its own ~1 s ticks; a random pause spreads both kinds of
            # submission evenly over the tick instead of locking them to one phase of it.
            time.sleep(phase.uniform(0, 1.0))
            marker = work / f"{which}-{i}"
            command = f"touch {marker}; sleep 300"
            t0 = time.perf_counter()
            if which == "sbatch":
                job_id = subprocess.run(
                    ["sbatch", "--parsable", "--job-name=bench-sbatch", "--ntasks=1", "--cpus-per-task=1",
                     "--mem=16", f"--exclude={PLAIN_EXCLUDE}", f"--output={work}/sbatch-{i}.log",
                     f"--wrap={command}"],
                    capture_output=True, text=True, check=True).stdout.strip()
                known = job_id
                job_id, submitted, running, started = wait_running_and_started(
                    lambda jid=known: jid, marker, t0, poll_s
                )
                into = plain
            else:
                body = (f"name: bench{i}\ntaskRoles:\n  w:\n    resourcePerInstance: {{gpu: 0, cpu: 1, memoryMB: 16}}\n"
                        f"    commands: [\"{command}\"]\n")
                tid = server.client.submit(body)["id"]
                job_id, submitted, running, started = wait_running_and_started(
                    read_job_id(f"slurm/*/jobs/{tid}/0/slurm-gang/job_id", server.home), marker, t0, poll_s)
                into = ours
            if submitted is not None:
                into["in Slurm"].append(submitted)
            if running is not None:
                into["running"].append(running)
            if started is not None:
                into["started"].append(started)
            if job_id:
                started_jobs.append(job_id)
    # Cancelled only now: a job ending while the next is submitted changes how soon Slurm
    # schedules the next one (by hundreds of ms, in either direction).
    subprocess.run(["scancel", *started_jobs], check=False)
    for what in ("in Slurm", "running", "started"):
        mean_plain, mean_ours = statistics.fmean(plain[what]), statistics.fmean(ours[what])
        print(f"submit → {what:8s}  sbatch mean {mean_plain * 1000:6.0f} ms | trainyard mean {mean_ours * 1000:6.0f} ms"
              f"  ratio {mean_ours / mean_plain:.2f}x")
        p50_plain, p50_ours = percentile(plain[what], 50), percentile(ours[what], 50)
        p90_plain, p90_ours = percentile(plain[what], 90), percentile(ours[what], 90)
        print(f"submit → {what:8s}  sbatch p50 {p50_plain * 1000:6.0f} ms p90 {p90_plain * 1000:6.0f} ms"
              f" | trainyard p50 {p50_ours * 1000:6.0f} ms p90 {p90_ours * 1000:6.0f} ms"
              f"  ({len(plain[what])}/{len(ours[what])} samples)")
        if what == "running":
            print("  " + ratio_line(f"trainyard/sbatch p50 ({what})", p50_ours / p50_plain, TARGET_RATIO,
                                    lower_is_better=True, unit="x"))
        else:
            print(f"  trainyard/sbatch p50 ({what}): {p50_ours / p50_plain:.2f}x (information)")


def burst(server, count: int) -> None:
    def body(i: int) -> str:
        gpu = 1 if i % 4 == 0 else 0
        code = 3 if i % 5 == 0 else 0
        return (f"name: burst{i}\njobRetryCount: 0\ntaskRoles:\n  w:\n"
                f"    resourcePerInstance: {{gpu: {gpu}, cpu: 1, memoryMB: 64}}\n"
                f"    commands: [\"sleep 0.5\", \"exit {code}\"]\n")

    t0 = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(lambda i: server.client.submit(body(i))["id"], range(count)))
    submitted = time.perf_counter() - t0
    expected = {job_id: ("FAILED", 3) if i % 5 == 0 else ("SUCCEEDED", 0) for i, job_id in enumerate(ids)}
    deadline = time.monotonic() + 600
    pending = set(ids)
    while pending and time.monotonic() < deadline:
        page = server.client.jobs(state="WAITING,RUNNING", limit=500)
        pending = {j["id"] for j in page["items"]} & set(ids)
        time.sleep(0.25)
    wall = time.perf_counter() - t0
    wrong = []
    for job_id, want in expected.items():
        job = server.client.job(job_id)
        got = (job["state"], job["exitCode"])
        if got != want:
            wrong.append((job_id, got, want, job.get("stateMessage"),
                          [t.get("message") for a in job.get("attempts", []) for t in a.get("tasks", [])]))
    names = subprocess.run(["squeue", "--noheader", "--all", "--states=all", "--format=%j"],
                           capture_output=True, text=True).stdout.split()
    prefix = next(iter(server.home.glob("slurm/*/jobs/*/0/slurm-gang/submitting"))).read_text().rsplit("-", 4)[0]
    per_job = {job_id: 0 for job_id in ids}
    for name in names:
        if name.startswith(prefix + "-"):
            job = int(name[len(prefix) + 1:].split("-")[0])
            if job in per_job:
                per_job[job] += 1
    twice = {j: n for j, n in per_job.items() if n != 1}
    print(f"burst: {count} jobs submitted in {submitted:.2f} s; all ended after {wall:.1f} s "
          f"({count / wall:.1f} jobs/s); unfinished {len(pending)}; wrong state/exit {len(wrong)}; "
          f"Slurm jobs per Trainyard job != 1: {len(twice)}; Slurm jobs seen {sum(per_job.values())}")
    for item in wrong[:10]:
        print("  wrong:", item)
    ok = not pending and not wrong and not twice
    print(f"  burst check: {'PASS' if ok else 'FAIL'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=16, help="latency rounds (default 16; 2 CPUs each)")
    parser.add_argument("--burst", type=int, default=200, help="jobs in the burst (default 200; 0 skips)")
    parser.add_argument("--poll-ms", type=float, default=10.0)
    args = parser.parse_args()
    if not os.environ.get("SLURM_CONF"):
        print("SLURM_CONF is not set: run  export \"$(scripts/dev-slurm.sh start)\"  first", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-slurm-") as tmp, \
            yard_server(local_gpus=None, extra_args=("--backend", "slurm")) as server:
        work = Path(tmp)
        os.chmod(work, 0o755)
        if args.n:
            latency(server, args.n, args.poll_ms / 1000, work)
        if args.burst:
            burst(server, args.burst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
