"""What a class's wait is made of, in a run of ``bench_live_scale.py --keep`` (issue 33).

Reads the kept home's SQLite store (jobs and their events) and prints, per class: the wait
to the first placement and how many scheduling cycles that placed something passed meanwhile
(placements less than ``CYCLE_GAP`` apart are one cycle's), placed -> started (the launch),
GPUs held against the runtime, the share placed as borrowed work, preemptions (as victims)
and their stop's round trip (preempted -> the task seen exited); and for medium and large,
which run one after another in their VC's cells, the time spent behind earlier jobs of the
same class and VC against the time as the first of them, and how many lower-priority jobs of
the VC were placed while it was first. Never asserts.

    python benchmarks/live_scale_waits.py HOME
"""

from __future__ import annotations

import argparse
import bisect
import sqlite3
import statistics
from collections import defaultdict
from datetime import datetime
from pathlib import Path

CYCLE_GAP = 0.05  # seconds between two placements of different cycles, at least (loop.MIN_CYCLE_GAP)
RANK = {"small": 0, "medium": 1, "large": 2}
RUNTIME = {"small": 0.2, "medium": 0.5, "large": 1.0}


def seconds(text: str | None) -> float | None:
    return None if text is None else datetime.fromisoformat(text).timestamp()


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("home", type=Path, help="the server's home that bench_live_scale.py --keep printed")
    args = parser.parse_args()
    db = sqlite3.connect(args.home / "trainyard.db")
    jobs = {
        job_id: {"name": name, "vc": vc, "submitted": seconds(sub), "started": seconds(start),
                 "finished": seconds(end), "placed": [], "borrowed": False, "preempted": [], "exited": []}
        for job_id, name, vc, sub, start, end in db.execute(
            "SELECT id, name, vc, submitted_at, started_at, finished_at FROM jobs")
    }
    for job_id, at, kind, message in db.execute(
            "SELECT job_id, at, kind, message FROM job_events WHERE kind IN ('placed', 'preempted', 'task-exited')"):
        job = jobs[job_id]
        if kind == "placed":
            job["placed"].append(seconds(at))
            job["borrowed"] |= "borrowed" in message
        else:
            job["preempted" if kind == "preempted" else "exited"].append(seconds(at))
    stamps = sorted(p for job in jobs.values() for p in job["placed"])
    cycles = [t for i, t in enumerate(stamps) if i == 0 or t - stamps[i - 1] > CYCLE_GAP]
    print(f"{len(jobs):,} jobs; {len(cycles)} cycles placed something, one every "
          f"{(cycles[-1] - cycles[0]) / max(1, len(cycles) - 1):.2f} s")
    by_vc: dict[str, list[tuple[int, dict]]] = defaultdict(list)
    for job_id, job in sorted(jobs.items()):
        by_vc[job["vc"]].append((job_id, job))
    for kind in ("large", "medium", "small"):
        placed = [j for j in jobs.values() if j["name"] == kind and j["placed"]]
        if not placed:
            continue
        waits = [j["placed"][0] - j["submitted"] for j in placed]
        passed = [bisect.bisect_left(cycles, j["placed"][0]) - bisect.bisect_right(cycles, j["submitted"])
                  for j in placed]
        launch = [j["started"] - j["placed"][-1] for j in placed if j["started"] is not None]
        held = [j["finished"] - j["started"] for j in placed if j["finished"] and j["started"]]
        victims = [j for j in placed if j["preempted"]]
        round_trip = [min((e for e in j["exited"] if e >= j["preempted"][0]), default=j["preempted"][0])
                      - j["preempted"][0] for j in victims]
        print(f"{kind}: {len(placed):,} placed; wait to the first placement mean {mean(waits):.1f} s, "
              f"{mean(passed):.1f} cycles passed meanwhile; placed -> started {mean(launch):.2f} s; GPUs held "
              f"{mean(held):.2f} s for a runtime of {RUNTIME[kind]} s; borrowed {sum(j['borrowed'] for j in placed)}; "
              f"preempted {len(victims)} (stop round trip mean {mean(round_trip):.2f} s)")
        if kind == "small":
            continue
        behind, first, overtaken = [], [], []
        for members in by_vc.values():
            same = [j for _, j in members if j["name"] == kind and j["placed"]]
            for previous, job in zip([None, *same], same):
                ready = job["submitted"] if previous is None else max(job["submitted"], previous["placed"][0])
                behind.append(ready - job["submitted"])
                first.append(job["placed"][0] - ready)
                overtaken.append(sum(1 for _, other in members if RANK[other["name"]] < RANK[kind]
                                     and other["placed"] and ready < other["placed"][0] < job["placed"][0]))
        print(f"  behind earlier {kind} jobs of its VC mean {mean(behind):.1f} s; first of them mean "
              f"{mean(first):.2f} s; lower-priority jobs of its VC placed meanwhile mean {mean(overtaken):.1f}")


if __name__ == "__main__":
    main()
