"""Simulated nodes for scale tests: what KWOK is to Kubernetes. A STAND-IN, named as one.

``yard up --backend simulated`` (settings ``simulated_nodes``, ``simulated_gpus_per_node``,
``simulated_gpu_model``) serves a cluster of nodes that exist only here: they report their
GPUs, CPUs and memory like real ones, and "run" a task by remembering when it started. No
process is made, no file written: the live server, its store, controller and scheduler do all
their work at the size of a real cluster, on a machine that has none (issue 33's live-server
benchmark pushes a Kueue-like workload through it).

A task runs for the seconds its job says — ``TRAINYARD_SIMULATED_SECONDS`` in its env, else
the first ``sleep N`` of its commands, else ``default_seconds`` — and then ends with
``TRAINYARD_SIMULATED_EXIT`` (default 0); a stop ends it at once as SIGTERM would. Its log is
one line saying so. Time is the controller's ``Clock``, so a test can move it. Nothing is kept
across a restart of the server: tasks it had "started" are lost, as on nodes that vanished.

It announces ends (``TaskEndNotices``): once a callback is registered, a thread of its own
calls it when a task's stated end comes (in real seconds by the clock's ``monotonic``) or
a stop ends one, so that the controller's next cycle comes then, not at its next tick.
"""

from __future__ import annotations

import heapq
import logging
import re
import signal
import threading
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from trainyard.backends.base import GpuInfo, LogChunk, NodeInventory, TaskKey, TaskLaunch, TaskStatus
from trainyard.core.clock import Clock, SystemClock

SECONDS_VARIABLE = "TRAINYARD_SIMULATED_SECONDS"
EXIT_VARIABLE = "TRAINYARD_SIMULATED_EXIT"
FIRST_PORT = 20000
log = logging.getLogger(__name__)
_SLEEP = re.compile(r"(?:^|[\s;&|(])sleep\s+(\d+(?:\.\d+)?)\b")


@dataclass
class _Run:
    node: str
    started: float  # the clock's monotonic seconds
    seconds: float
    exit_code: int
    stopped: float | None = None


class SimulatedBackend:
    """``nodes`` simulated nodes of ``gpus_per_node`` GPUs each (``sim-0001``, ...; a rack
    label every ``nodes_per_rack``), running tasks for their stated durations."""

    name = "simulated"

    def __init__(self, nodes: int = 100, gpus_per_node: int = 8, *, gpu_model: str = "A100",
                 gpu_memory_mb: int = 81920, cpu_milli: int = 64000, memory_mb: int = 512 * 1024,
                 nodes_per_rack: int = 32, default_seconds: float = 60.0, clock: Clock | None = None) -> None:
        if nodes < 1 or gpus_per_node < 0:
            raise ValueError(f"a simulated cluster needs at least one node and no negative GPUs (got {nodes} "
                             f"nodes of {gpus_per_node} GPUs)")
        self.clock = clock or SystemClock()
        self.default_seconds = default_seconds
        width = max(4, len(str(nodes)))
        self._nodes = tuple(
            NodeInventory(
                name=f"sim-{n:0{width}d}", address=f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}",
                cpu_milli=cpu_milli, memory_mb=memory_mb,
                gpus=tuple(GpuInfo(index=i, model=gpu_model, memory_mb=gpu_memory_mb, uuid=f"GPU-sim-{n}-{i}",
                                   simulated=True, group=f"numa{i * 2 // max(gpus_per_node, 1)}")
                           for i in range(gpus_per_node)),
                labels={"rack": f"r{(n - 1) // max(nodes_per_rack, 1) + 1}", "simulated": "true"},
            )
            for n in range(1, nodes + 1))
        self._runs: dict[TaskKey, _Run] = {}
        self._next_port: dict[str, int] = {}
        self._lock = threading.Lock()  # the controller's thread and the API's (logs) both call in
        # Ends to announce (``on_task_end``): the stated ends to come, earliest first, on the
        # clock's monotonic seconds, and the one thread that waits for them while any are due.
        self._callbacks: list[Callable[[], None]] = []
        self._ends: list[float] = []
        self._alarm = threading.Condition(self._lock)
        self._watching = False

    def inventory(self) -> list[NodeInventory]:
        return list(self._nodes)

    def allocate_ports(self, node: str, count: int, taken: Collection[int] = ()) -> list[int]:
        with self._lock:
            port = self._next_port.get(node, FIRST_PORT)
            got: list[int] = []
            while len(got) < count:
                if port not in taken:
                    got.append(port)
                port = port + 1 if port < 65535 else FIRST_PORT
            self._next_port[node] = port
            return got

    def launch(self, task: TaskLaunch) -> None:
        with self._lock:
            if task.key in self._runs:
                return
            seconds, exit_code = stated(task, self.default_seconds)
            self._runs[task.key] = _Run(task.node, self.clock.monotonic(), seconds, exit_code)
            self._announce(self.clock.monotonic() + seconds)

    def observe(self, keys: Iterable[TaskKey]) -> dict[TaskKey, TaskStatus]:
        now = self.clock.monotonic()
        with self._lock:
            return {key: self._status(key, self._runs.get(key), now) for key in keys}

    def stop(self, key: TaskKey, grace_seconds: float) -> None:
        with self._lock:
            run = self._runs.get(key)
            if run is not None and run.stopped is None and self.clock.monotonic() < run.started + run.seconds:
                run.stopped = self.clock.monotonic()
                self._announce(run.stopped)

    def on_task_end(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._callbacks.append(callback)
            for run in self._runs.values():  # those running now, too
                if run.stopped is None:
                    self._announce(run.started + run.seconds)

    def _announce(self, due: float) -> None:
        """Call the callbacks at ``due`` (the lock held)."""
        if not self._callbacks:
            return
        heapq.heappush(self._ends, due)
        if not self._watching:
            self._watching = True
            threading.Thread(target=self._watch, name="trainyard-simulated-ends", daemon=True).start()
        elif self._ends[0] == due:
            self._alarm.notify()  # earlier than the one it waits for

    def _watch(self) -> None:
        while True:
            with self._lock:
                while True:
                    if not self._ends:
                        self._watching = False
                        return
                    wait = self._ends[0] - self.clock.monotonic()
                    if wait <= 0:
                        break
                    self._alarm.wait(wait)
                now = self.clock.monotonic()
                while self._ends and self._ends[0] <= now:
                    heapq.heappop(self._ends)
                callbacks = tuple(self._callbacks)
            for callback in callbacks:
                try:
                    callback()
                except Exception:  # noqa: BLE001 - one bad callback must not end the announcements
                    log.exception("a task-end callback failed")

    def read_log(self, key: TaskKey, offset: int = 0, limit: int = 1 << 20) -> LogChunk:
        with self._lock:
            run = self._runs.get(key)
            if run is None:
                return LogChunk(b"", 0, 0, exists=False)
            text = (f"simulated task {key} on {run.node}: runs {run.seconds:g} s, then exits "
                    f"{run.exit_code} (no process: backend simulated)\n").encode()
        start = max(0, len(text) + offset) if offset < 0 else min(offset, len(text))
        return LogChunk(text[start:start + limit], start, len(text))

    def _status(self, key: TaskKey, run: _Run | None, now: float) -> TaskStatus:
        if run is None:
            return TaskStatus(key, running=False, lost=True, message="no such task on the simulated nodes (the "
                              "server restarted since it started: simulated nodes keep nothing)")
        if run.stopped is not None:
            return TaskStatus(key, running=False, exit_code=128 + signal.SIGTERM, signal=signal.SIGTERM,
                              message="stopped")
        if now < run.started + run.seconds:
            return TaskStatus(key, running=True)
        return TaskStatus(key, running=False, exit_code=run.exit_code)


def stated(task: TaskLaunch, default_seconds: float) -> tuple[float, int]:
    """How long a task runs and how it ends, as its job says (see the module doc)."""
    seconds = default_seconds
    given = task.env.get(SECONDS_VARIABLE)
    found = _SLEEP.search(task.script)
    try:
        if given is not None:
            seconds = float(given)
        elif found is not None:
            seconds = float(found.group(1))
    except ValueError:
        pass
    try:
        exit_code = int(task.env.get(EXIT_VARIABLE, "0"))
    except ValueError:
        exit_code = 1
    return max(0.0, seconds), exit_code
