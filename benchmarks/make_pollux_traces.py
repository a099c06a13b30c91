"""The Pollux files the simulator ships (``sim/data/traces/pollux``), cut from Pollux's
artifact: github.com/petuum/adaptdl, branch ``osdi21-artifact``, folder ``simulator/``.

Values are copied as the artifact writes them; only rows and columns ``sim/pollux.py`` does
not read are left out, and each file is gzipped with no timestamp, so the same bytes come out
every time:

* ``load-L_workload-K.csv.gz`` — ``workloads[-L]/workload-K.csv``, unchanged (L = 1.0 is the
  folder ``workloads/``);
* ``APP_step_times.csv.gz`` — the rows of ``traces/APP/placements.csv`` whose placement
  fills nodes of 4 GPUs but one (``1``…``4``, ``14``…``44``, …, ``4444``: the measured step
  times at 1 to 16 GPUs packed 4 to a node), then the rows of ``traces/APP/scalability.csv``
  with every node full (24, 32, 48 and 64 GPUs on 6, 8, 12 and 16 nodes), their placement
  written the same way (``444444`` for 6 nodes of 4);
* ``APP_validation.csv.gz`` — ``traces/APP/validation-B.csv`` for every batch size B, the
  first ``MAX_EPOCHS[APP]`` rows (the epochs Pollux's simulator trains for), columns
  ``progress,grad_sqr,grad_var`` with ``batch_size`` and ``epoch`` (the row's index) before
  them;
* ``pollux_paper_results_avg_jct_s.csv.gz`` — the ``avgs`` and ``mean`` of every
  ``results-*/*/summary.json`` (given here as the CSV made of them, ``--results``);
* ``pollux_paper_results_jct_per_job.csv.gz`` — the ``jcts`` of every
  ``results-jobload/*/summary.json`` (each job's JCT in s, per policy, load and workload).

    git -C ADAPTDL archive osdi21-artifact simulator | tar -x -C /tmp/pollux
    python benchmarks/make_pollux_traces.py /tmp/pollux/simulator \\
        --results pollux_paper_results_avg_jct_s.csv --out src/trainyard/sim/data/traces/pollux
"""

from __future__ import annotations

import argparse
import csv
import gzip
import io
import json
import re
from pathlib import Path

# applications.py's APPLICATIONS: the epochs each application trains for.
MAX_EPOCHS = {"bert": 2, "cifar10": 100, "deepspeech2": 80, "imagenet": 90, "ncf": 10, "yolov3": 50}
LOADS = {"0.5": "workloads-0.5", "1.0": "workloads", "1.5": "workloads-1.5", "2.0": "workloads-2.0"}
GPUS_PER_NODE = 4


def packed(gpus: int) -> str:
    """The placement string of ``gpus`` GPUs on as few 4-GPU nodes as hold them, in the
    artifact's spelling (the smallest rotation: ``14`` for 4 + 1)."""
    full, rest = divmod(gpus, GPUS_PER_NODE)
    return (str(rest) if rest else "") + str(GPUS_PER_NODE) * full


def write_gz(path: Path, header: list[str], rows: list[list[str]]) -> None:
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
        f.write(text.getvalue().encode())


def read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def step_times(app_dir: Path) -> list[list[str]]:
    within = {packed(n) for n in range(1, 4 * GPUS_PER_NODE + 1)}
    out = [[r["placement"], r["local_bsz"], r["step_time"], r["sync_time"]]
           for r in read(app_dir / "placements.csv") if r["placement"] in within]
    for r in read(app_dir / "scalability.csv"):
        nodes, gpus = int(r["num_nodes"]), int(r["num_replicas"])
        if gpus == nodes * GPUS_PER_NODE:
            out.append([str(GPUS_PER_NODE) * nodes, r["local_bsz"], r["step_time"], r["sync_time"]])
    return out


def validation(app_dir: Path, epochs: int) -> list[list[str]]:
    out = []
    files = {int(m.group(1)): p for p in app_dir.glob("validation-*.csv")
             if (m := re.fullmatch(r"validation-(\d+)\.csv", p.name))}
    for batch_size in sorted(files):
        rows = read(files[batch_size])
        if len(rows) < epochs:
            raise SystemExit(f"{files[batch_size]}: {len(rows)} epochs, {epochs} needed")
        out += [[str(batch_size), str(e), r["progress"], r["grad_sqr"], r["grad_var"]]
                for e, r in enumerate(rows[:epochs])]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("simulator", type=Path, help="the artifact's simulator/ folder")
    parser.add_argument("--results", type=Path, required=True, help="the published results CSV")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for load, folder in LOADS.items():
        for path in sorted((args.simulator / folder).glob("workload-*.csv")):
            rows = list(csv.reader(open(path, newline="")))
            write_gz(args.out / f"load-{load}_{path.name}.gz", rows[0], rows[1:])
    for app, epochs in MAX_EPOCHS.items():
        app_dir = args.simulator / "traces" / app
        write_gz(args.out / f"{app}_step_times.csv.gz", ["placement", "local_bsz", "step_time", "sync_time"],
                 step_times(app_dir))
        write_gz(args.out / f"{app}_validation.csv.gz", ["batch_size", "epoch", "progress", "grad_sqr", "grad_var"],
                 validation(app_dir, epochs))
    results = list(csv.reader(open(args.results, newline="")))
    write_gz(args.out / "pollux_paper_results_avg_jct_s.csv.gz", results[0], results[1:])
    per_job = []
    for summary in sorted((args.simulator / "results-jobload").glob("*/summary.json")):
        jcts = json.loads(summary.read_text())["jcts"]
        per_job += [[summary.parent.name, workload, name, str(jct)]
                    for workload in sorted(jcts, key=lambda w: int(w.rpartition("-")[2]))
                    for name, jct in jcts[workload].items()]
    write_gz(args.out / "pollux_paper_results_jct_per_job.csv.gz", ["policy_or_setting", "workload", "name", "jct_s"],
             per_job)


if __name__ == "__main__":
    main()
