"""Elastic jobs in the simulator: how many workers a job may run on, and how fast it goes
on each number (``TraceJob.elastic``).

A trace gives each job a size (its GPUs) and a duration at that size. An elastic job may
run on ``low`` to ``high`` workers of one GPU each; on ``n`` workers it progresses
``speed(n)`` seconds of that duration per second: 1 at its traced size, and in between
by its throughput curve — linear by default (``n / size``, perfect scaling, the optimistic
bound), or measured points (Pollux's per-application step times), interpolated linearly
between points and held flat beyond the last one (more workers than were measured buy
nothing). Growing or shrinking costs ``resize_cost`` seconds without progress (the
workers restart from the job's last checkpoint and rendezvous again: torchrun's elastic
contract), as a suspension costs ``suspend_cost``.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainyard.scheduler.elastic import throughput
from trainyard.scheduler.snapshot import TaskRequest


@dataclass(frozen=True)
class Elastic:
    low: int  # workers it starts with (its minimum)
    high: int  # workers it may grow to
    # Measured throughput by number of workers, ascending; (): linear in the workers.
    curve: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high:
            raise ValueError(f"an elastic job runs on 1 <= min <= max workers; got {self.low}..{self.high}")

    def throughput(self, workers: int) -> float:
        return throughput(self.curve, workers)

    def speed(self, workers: int, size: int) -> float:
        """Seconds of the traced duration (at ``size`` workers) done per second on ``workers``."""
        return self.throughput(workers) / self.throughput(size)


def workers(first: int, count: int) -> tuple[TaskRequest, ...]:
    """Worker tasks ``first`` .. ``first + count - 1``, one GPU each."""
    return tuple(TaskRequest("worker", i, 1000, 0, 0) for i in range(first, first + count))


def linear(gpus: int, low: str) -> Elastic:
    """A job of ``gpus`` GPUs (a trace's, with no measurements) made elastic with a linear
    speedup, up to twice its size (at most 64), from the size it asked (``"asked"``), half of
    it (``"half"``) or 1 GPU (``"least"``)."""
    high = max(gpus, min(2 * gpus, 64))
    least = {"asked": gpus, "half": max(1, gpus // 2), "least": 1}
    if low not in least:
        raise ValueError(f"--elastic: one of off, {', '.join(least)}; got {low!r}")
    return Elastic(least[low], high)
