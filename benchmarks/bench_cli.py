"""The ``yard`` CLI's own cost, per common command, against a live server (target < 150 ms
on an idle machine, issue 33).

A ``yard up --local-gpus 1`` with a few jobs; then each command (``jobs``, ``job ID``,
``logs ID``, ``submit FILE --no-workdir``, and ``submit job.yaml`` in a project folder, which
sends the folder) runs R times as a subprocess of the installed
console script, and the median wall time is printed with its ratio to the target, beside
what the same Python costs to start and to import the command's modules (``-X importtime``:
the modules above 5 ms), so that the time a command spends talking to the server can be told
from the time it spends getting ready; then what the server's side of those requests takes
(each over one kept-alive connection). Prints; never asserts.

    python benchmarks/bench_cli.py [--runs 7]
"""

from __future__ import annotations

import argparse
import json
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import median, ratio_line, tiny_job_yaml, yard_command, yard_server

TARGET_S = 0.150


def wall(args: list[str], env: dict[str, str], runs: int) -> float:
    return median(walls([args], env, runs)[0][0])


def walls(commands: list[list[str]], env: dict[str, str], runs: int,
          cwd: Path | None = None) -> list[tuple[list[float], list[float]]]:
    """Each command's wall times and CPU times (user + system, s), the commands run in turn,
    ``runs`` rounds. The CPU time is the command's own work: on a loaded machine its wall time
    also counts the time it waited for a core, and the server's answer."""
    times: list[tuple[list[float], list[float]]] = [([], []) for _ in commands]
    for _ in range(runs):
        for args, (took, cpu) in zip(commands, times):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            done = subprocess.run(args, env=env, capture_output=True, text=True, cwd=cwd)
            took.append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
            if done.returncode != 0:
                raise SystemExit(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return times


def heavy_imports(command: str, env: dict[str, str], cwd: Path | None = None) -> list[tuple[float, str]]:
    """The modules that cost a command more than 5 ms to import (cumulative, ms)."""
    code = f"import sys; from trainyard.cli.main import main; sys.argv = ['yard', *{command.split()!r}]; main()"
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=env, capture_output=True, text=True,
                          cwd=cwd)
    found = []
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[1].strip().isdigit() and int(parts[1]) > 5000 and \
                parts[2].strip().startswith(("trainyard.cli.", "trainyard.client", "httpx", "pydantic", "yaml",
                                             "pathspec")):
            found.append((int(parts[1]) / 1000, parts[2].strip()))
    return sorted(found, reverse=True)[:8]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--against", metavar="CMD", help="another yard to time in turn with this one (older code)")
    args = parser.parse_args()
    yard = yard_command()
    against = shlex.split(args.against) if args.against else None
    print(f"yard: {' '.join(yard)}" + (f"; against: {args.against}" if against else ""))
    started = wall([sys.executable, "-c", "pass"], {}, args.runs)
    print(f"python itself: {started * 1000:.0f} ms to start and stop (median of {args.runs})")
    with yard_server(local_gpus=1) as server:
        job = server.client.submit(tiny_job_yaml("bench-cli", command="echo hello")).id
        server.client.wait(job, timeout=60)
        job_file = Path(tempfile.mkdtemp(prefix="bench-cli-")) / "job.yaml"
        job_file.write_text(tiny_job_yaml("bench-cli-submit", command="true"))
        # A project folder, the job file in it: `yard submit job.yaml` there sends the folder
        # (what .gitignore leaves in; the same content each time, so sent once and then named).
        project = job_file.parent
        (project / "train.py").write_text("print('training')\n")
        (project / ".gitignore").write_text("__pycache__/\n*.ckpt\n")
        env = server.env
        for label, command, cwd in (("jobs", "jobs", None), ("job", f"job {job}", None), ("logs", f"logs {job}", None),
                                    ("submit", f"submit {job_file} --no-workdir", None),
                                    ("submit (its folder)", "submit job.yaml", project)):
            runs = walls([[*yard, *command.split()]] + ([[*against, *command.split()]] if against else []), env,
                         args.runs, cwd)
            (took, cpu), others = runs[0], runs[1:]
            print(ratio_line(f"yard {label}", median(took) * 1000, TARGET_S * 1000,
                             lower_is_better=True, unit="ms") + f"; best {min(took) * 1000:.0f} ms; "
                  f"its CPU: median {median(cpu) * 1000:.0f} ms, best {min(cpu) * 1000:.0f} ms")
            for old_took, old_cpu in others:
                print(f"    against: median {median(old_took) * 1000:.0f} ms, best {min(old_took) * 1000:.0f} ms; "
                      f"its CPU: median {median(old_cpu) * 1000:.0f} ms, best {min(old_cpu) * 1000:.0f} ms "
                      f"(this one takes {median(took) / median(old_took):.2f}x of its wall time, "
                      f"{median(cpu) / median(old_cpu):.2f}x of its CPU)")
            imports = heavy_imports(command, env, cwd)
            print("    imports over 5 ms (cumulative): " + ", ".join(f"{m} {t:.0f}" for t, m in imports))
        server_side(server.url, server.token, job_file.read_bytes(), args.runs)


def server_side(url: str, token: str, job: bytes, runs: int) -> None:
    """What the requests of `yard submit` take on the server's side: each sent ``runs`` times
    over one kept-alive connection (`yard`'s own HTTP, client_http.py), so that the time is the
    server's handling and the loopback, not a client's start."""
    from trainyard.client_http import PlainHTTP
    from trainyard.client_input import new_key

    http = PlainHTTP(url + "/api/v1", {"Authorization": f"Bearer {token}"}, 30.0)
    json.loads(http.request("GET", "/workdirs/limits").content)  # connected, and the answer is JSON
    calls = {"POST /jobs (a submit)": lambda: http.request("POST", "/jobs", content=job, headers={
                 "Content-Type": "application/yaml", "Idempotency-Key": new_key()}),
             "GET /workdirs/limits": lambda: http.request("GET", "/workdirs/limits"),
             "GET /jobs?limit=20": lambda: http.request("GET", "/jobs", params={"limit": 20})}
    for label, call in calls.items():
        took = []
        for _ in range(runs):
            started = time.perf_counter()
            answer = call()
            took.append(time.perf_counter() - started)
            if not answer.is_success:
                raise SystemExit(f"{label}: {answer.status_code} {answer.content[:200]!r}")
        print(f"server side, {label}: median {median(took) * 1000:.1f} ms, best {min(took) * 1000:.1f} ms "
              f"(wall, one kept-alive connection, {runs} runs)")
    http.close()


if __name__ == "__main__":
    main()
