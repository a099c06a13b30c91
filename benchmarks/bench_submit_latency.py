"""Submit→RUNNING latency on the local backend (target: p50 < 0.2 s).

Starts a real ``yard up --local-gpus 1`` server (temporary home, SQLite), then submits N
tiny jobs one after another (``sleep 30``, cpu 0.01, memoryMB 16, no GPU). For each job it
measures the wall time from just before ``POST /api/v1/jobs`` until ``GET /api/v1/jobs/{id}``
first reports ``RUNNING`` (polled every ``--poll-ms``, default 5 ms), and separately the
time the POST itself took, and (for information) the time until the supervisor has
actually forked the task process (its ``pid.json`` under the task directory names it).
Each job is stopped once it is RUNNING so they do not pile up.
Prints p50/p90/max and the ratio of p50 to the 0.2 s target. Never asserts.

``--queue K`` first fills the queue with K 1-GPU jobs that stay WAITING behind a job holding
the one GPU (a busy cluster): the CPU-only probe jobs still fit, but every controller cycle
now also works through the K waiting jobs.

``--task-limits none`` runs the server without cgroup limits (``auto``, the default, enforces
each task's cpu and memoryMB where cgroups work): run both to see what making and joining a
task's cgroup adds to the start.

Run:  python benchmarks/bench_submit_latency.py [-n 50] [--poll-ms 5] [--settle-ms 50] [--queue K]
      [--task-limits auto|none]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import httpx  # noqa: E402
from common import percentile, ratio_line, task_pid_files, tiny_job_yaml, yard_server  # noqa: E402

TARGET_P50_S = 0.2


def _wait_task_forked(home: Path, job_id: int, t0: float, timeout_s: float, poll_s: float) -> float | None:
    """Seconds from ``t0`` until the job's task process exists (its pid.json records it)."""
    while time.perf_counter() - t0 < timeout_s:
        for pid_file in task_pid_files(home, job_id):
            try:
                if json.loads(pid_file.read_text()).get("task"):
                    return time.perf_counter() - t0
            except (OSError, ValueError):
                pass
        time.sleep(poll_s)
    return None


def _fill_queue(server, k: int) -> None:
    """A GPU-holding job, then ``k`` 1-GPU jobs that stay WAITING behind it (a busy queue)."""
    from bench_submit_throughput import _hold_the_gpu, run_async

    _hold_the_gpu(server)
    t0 = time.perf_counter()
    run_async(server, k, 8, "json")
    print(f"  queued {k} WAITING 1-GPU jobs behind a GPU-holding job in {time.perf_counter() - t0:.1f} s")
    time.sleep(1.0)  # let the controller settle on the new queue


def measure(n: int, poll_s: float, settle_s: float, timeout_s: float = 30.0, queue: int = 0,
            task_limits: str = "auto") -> dict:
    latencies: list[float] = []
    post_times: list[float] = []
    polls: list[int] = []
    forked: list[float] = []
    failures = 0
    with yard_server(local_gpus=1, stop_jobs=queue == 0, extra_args=("--task-limits", task_limits)) as server:
        if queue:
            _fill_queue(server, queue)
        body = tiny_job_yaml("latency").encode()
        with httpx.Client(base_url=server.url + "/api/v1", headers=server.headers, timeout=30) as http:
            # one warm-up job: first-request costs (imports, pydantic schema build) are not steady state
            for i in range(n + 1):
                t0 = time.perf_counter()
                r = http.post("/jobs", content=body, headers={"Content-Type": "application/yaml"})
                t_post = time.perf_counter() - t0
                r.raise_for_status()
                job_id = r.json()["id"]
                state, count = r.json()["state"], 0
                while state != "RUNNING":
                    if time.perf_counter() - t0 > timeout_s or state in ("FAILED", "STOPPED", "SUCCEEDED"):
                        break
                    time.sleep(poll_s)
                    state = http.get(f"/jobs/{job_id}").json()["state"]
                    count += 1
                elapsed = time.perf_counter() - t0
                # Secondary: until the supervisor has forked the task (pid.json names its group).
                spawned = None
                if state == "RUNNING":
                    spawned = _wait_task_forked(server.home, job_id, t0, timeout_s, poll_s)
                if i > 0:
                    if state == "RUNNING":
                        latencies.append(elapsed)
                        post_times.append(t_post)
                        polls.append(count)
                        if spawned is not None:
                            forked.append(spawned)
                    else:
                        failures += 1
                        print(f"  job {job_id}: ended as {state} after {elapsed:.2f} s", file=sys.stderr)
                http.post(f"/jobs/{job_id}/stop")
                if settle_s:
                    time.sleep(settle_s)
    return {"latencies": latencies, "post_times": post_times, "polls": polls, "forked": forked,
            "failures": failures}


def report(result: dict) -> dict:
    lat, post = result["latencies"], result["post_times"]
    if not lat:
        print("submit→RUNNING: no job reached RUNNING")
        return {"p50_s": float("nan")}
    p50, p90, mx = percentile(lat, 50), percentile(lat, 90), max(lat)
    print(f"submit→RUNNING over {len(lat)} jobs ({result['failures']} failed): "
          f"p50 {p50 * 1000:.1f} ms, p90 {percentile(lat, 90) * 1000:.1f} ms, max {mx * 1000:.1f} ms, "
          f"min {min(lat) * 1000:.1f} ms")
    print(f"  of which POST /jobs itself: p50 {percentile(post, 50) * 1000:.1f} ms, "
          f"p90 {percentile(post, 90) * 1000:.1f} ms; GET polls per job p50 {percentile(result['polls'], 50)}")
    if result["forked"]:
        fk = result["forked"]
        print(f"  (info) until the task process is actually forked by its supervisor: "
              f"p50 {percentile(fk, 50) * 1000:.1f} ms, p90 {percentile(fk, 90) * 1000:.1f} ms")
    print("  " + ratio_line("submit→RUNNING p50", p50, TARGET_P50_S, lower_is_better=True, unit="s"))
    return {"p50_s": p50, "p90_s": p90, "max_s": mx, "post_p50_s": percentile(post, 50),
            "target_s": TARGET_P50_S, "ratio": p50 / TARGET_P50_S}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--jobs", type=int, default=50, help="jobs to submit (default 50)")
    parser.add_argument("--poll-ms", type=float, default=5.0, help="GET poll interval (default 5 ms)")
    parser.add_argument("--settle-ms", type=float, default=50.0,
                        help="pause after stopping each job, so stops do not overlap the next submit")
    parser.add_argument("--queue", type=int, default=0, metavar="K",
                        help="first queue K 1-GPU jobs that stay WAITING (a busy cluster); default 0")
    parser.add_argument("--task-limits", choices=("auto", "none"), default="auto",
                        help="cgroup limits for the tasks: auto (default: where cgroups work) or none")
    args = parser.parse_args(argv)
    print(f"== submit→RUNNING latency: {args.jobs} sequential jobs, poll every {args.poll_ms:g} ms"
          f"{f', {args.queue} jobs WAITING in the queue' if args.queue else ''}, task limits {args.task_limits} ==")
    return report(measure(args.jobs, args.poll_ms / 1000, args.settle_ms / 1000, queue=args.queue,
                          task_limits=args.task_limits))


if __name__ == "__main__":
    main()
