"""The ``yard`` CLI's own cost, per common command, against a live server (target < 150 ms
on an idle machine, issue 33).

A ``yard up --local-gpus 1`` with a few jobs; then each command (``jobs``, ``job ID``,
``logs ID``, ``submit FILE --no-workdir``) runs R times as a subprocess of the installed
console script, and the median wall time is printed with its ratio to the target, beside
what the same Python costs to start and to import the command's modules (``-X importtime``:
the modules above 5 ms), so that the time a command spends talking to the server can be told
from the time it spends getting ready. Prints; never asserts.

    python benchmarks/bench_cli.py [--runs 7]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import median, ratio_line, tiny_job_yaml, yard_command, yard_server

TARGET_S = 0.150


def wall(args: list[str], env: dict[str, str], runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(args, env=env, capture_output=True, text=True)
        times.append(time.perf_counter() - started)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return median(times)


def heavy_imports(command: str, env: dict[str, str]) -> list[tuple[float, str]]:
    """The modules that cost a command more than 5 ms to import (cumulative, ms)."""
    code = f"import sys; from trainyard.cli.main import main; sys.argv = ['yard', *{command.split()!r}]; main()"
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=env, capture_output=True, text=True)
    found = []
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit() and int(parts[1]) > 5000 and \
                parts[2].strip().startswith(("trainyard.cli.", "trainyard.client", "httpx", "pydantic", "yaml")):
            found.append((int(parts[1]) / 1000, parts[2].strip()))
    return sorted(found, reverse=True)[:8]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    yard = yard_command()
    started = wall([sys.executable, "-c", "pass"], {}, args.runs)
    print(f"python itself: {started * 1000:.0f} ms to start and stop (median of {args.runs})")
    with yard_server(local_gpus=1) as server:
        job = server.client.submit(tiny_job_yaml("bench-cli", command="echo hello")).id
        server.client.wait(job, timeout=60)
        job_file = Path(tempfile.mkdtemp(prefix="bench-cli-")) / "job.yaml"
        job_file.write_text(tiny_job_yaml("bench-cli-submit", command="true"))
        env = server.env
        for command in ("jobs", f"job {job}", f"logs {job}", f"submit {job_file} --no-workdir"):
            took = wall([*yard, *command.split()], env, args.runs)
            print(ratio_line(f"yard {command.split()[0]}", took * 1000, TARGET_S * 1000, lower_is_better=True,
                             unit="ms"))
            imports = heavy_imports(command, env)
            print("    imports over 5 ms (cumulative): " + ", ".join(f"{m} {t:.0f}" for t, m in imports))


if __name__ == "__main__":
    main()
