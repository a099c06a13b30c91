"""How long root takes to empty a user's MPS pipe directory (``backends/mps.clear_pipe_dir``:
before each daemon starts and after it ends, under the user's lock) after a task filled it:
``--files`` empty files in one folder, and a chain of ``--depth`` nested folders (which a
recursive removal could not follow: root flattens it). Target: 100,000 entries in well under
``COMMAND_TIMEOUT_SECONDS`` (30 s), where it would stop and say so.

In process, as whoever runs it (the stand-in plan's uid is the caller's), in a temporary folder
on ``--dir`` (default /dev/shm: a tmpfs, as the node's /run is). Prints seconds and entries
per second for each shape, and the ratio to the timeout. Never asserts.

Run:  python benchmarks/bench_mps_clear.py [--files 100000] [--depth 5000] [--dir /dev/shm]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from trainyard.backends import mps


def plan_in(folder: Path) -> dict:
    root = folder / "n1" / "gpu0"
    plan = {"root": str(root), "key": f"{os.geteuid()}-alice", "uid": os.geteuid(), "gid": os.getegid()}
    root.mkdir(parents=True)
    mps.prepare(plan)
    return plan


def timed(label: str, plan: dict, entries: int) -> None:
    started = time.perf_counter()
    mps.clear_pipe_dir(plan)
    seconds = time.perf_counter() - started
    left = len(os.listdir(mps.pipe_dir(plan)))
    print(f"{label:<28} {entries:>8} entries  {seconds:7.2f} s  {entries / seconds:>10,.0f}/s  "
          f"{seconds / mps.COMMAND_TIMEOUT_SECONDS:.1%} of the timeout  ({left} left)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--depth", type=int, default=5_000)
    parser.add_argument("--dir", default="/dev/shm")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        plan = plan_in(Path(tmp))
        pipe = mps.pipe_dir(plan)
        for n in range(args.files):
            os.close(os.open(os.path.join(pipe, f"f{n}"), os.O_CREAT | os.O_WRONLY, 0o600))
        timed("flat folder of files", plan, args.files)
        fd = os.open(pipe, os.O_RDONLY | os.O_DIRECTORY)
        for _ in range(args.depth):  # one level at a time, through descriptors: no path too long
            os.mkdir("d", dir_fd=fd)
            deeper = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = deeper
        os.close(fd)
        timed("chain of nested folders", plan, args.depth)


if __name__ == "__main__":
    main()
