"""Samples of this machine and of its running tasks (``backends.base.MetricsSource`` for the
local backend): psutil for the node's CPU, memory, disk and network, ``/proc`` for the
tasks' processes, NVML for the GPUs.

A task is its whole process tree: the process group the supervisor recorded in
``pid.json`` (its leader's pid is the group id) and every descendant of the leader, even
one that left the group (``setsid``) or lives in the bubblewrap sandbox's PID namespace;
pids are the host's, as psutil and NVML see them. One pass over ``/proc/*/stat`` per
round serves every task (CPU time, resident memory, parent and group links); each task
process's ``/proc/PID/io`` adds its disk I/O.

Rates (a task's CPU cores and disk I/O, the node's CPU and network) come from counter
deltas between two rounds; a task's first round averages over its life so far, the
node's first round leaves CPU and network unmeasured (None). A task's CPU time includes
its reaped children's (``children_user``/``children_system``), so short-lived helpers
count. Memory is the sum of the tree's resident sets (shared pages counted once per process).

GPUs: NVML stays initialised for the sampler's life. A device NVML reports lost, or no
longer lists, is ``healthy=False``. Simulated GPU slots report no utilisation, memory or
temperature (None, shown "n/a"), never invented figures.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psutil
import pynvml

from trainyard.backends import nvml_devices
from trainyard.backends.base import GpuInfo, TaskKey
from trainyard.core.metrics import GpuSample, NodeSample, Sampled, TaskSample

log = logging.getLogger(__name__)

_MIB = 1024 * 1024
_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")
_BOOT_TIME = psutil.boot_time()


@dataclass(frozen=True)
class _ProcFigures:
    """What one process contributed to its task this round."""

    cpu_seconds: float  # user + system, its own and its reaped children's
    rss_bytes: int
    read_bytes: int | None
    write_bytes: int | None


@dataclass(frozen=True)
class _TaskCounters:
    """A task's cumulative counters at one round, for the next round's rates."""

    mono: float
    cpu_seconds: float
    read_bytes: int | None
    write_bytes: int | None


@dataclass(frozen=True)
class _NodeCounters:
    mono: float
    cpu_busy: float
    cpu_total: float
    rx_bytes: int
    tx_bytes: int


class ProcessTable:
    """One snapshot of the machine's processes from ``/proc/PID/stat``: parent and group
    links, CPU time and resident memory, read once per round for every task."""

    def __init__(self) -> None:
        self.children: dict[int, list[int]] = {}
        self.groups: dict[int, list[int]] = {}
        self.stats: dict[int, tuple[float, int, float]] = {}  # pid -> (CPU s, RSS bytes, start s since boot)
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            try:
                with open(f"/proc/{pid}/stat", "rb") as f:
                    data = f.read()
            except OSError:  # it has just ended
                continue
            # Fields from 3 on follow the command name (which may hold spaces and parentheses):
            # field N is at index N - 3. 4 ppid, 5 pgrp, 14-17 utime stime cutime cstime
            # (own and reaped children's), 22 start time, 24 rss (pages).
            fields = data[data.rindex(b")") + 2 :].split()
            if fields[0] in (b"Z", b"X", b"x"):
                continue
            self.children.setdefault(int(fields[1]), []).append(pid)
            self.groups.setdefault(int(fields[2]), []).append(pid)
            cpu = sum(int(x) for x in fields[11:15]) / _TICKS
            self.stats[pid] = (cpu, int(fields[21]) * _PAGE, int(fields[19]) / _TICKS)

    def tree(self, leader: int, leader_started: int) -> set[int]:
        """``leader``, its process group and every descendant of either; empty when the
        pid ``leader`` now names another process (the group has ended)."""
        started = self.stats.get(leader)
        if started is not None and round(started[2] * _TICKS) != leader_started:
            return set()
        found: set[int] = set()
        todo = [leader, *self.groups.get(leader, ())]
        while todo:
            pid = todo.pop()
            if pid in found or pid not in self.stats:
                continue
            found.add(pid)
            todo.extend(self.children.get(pid, ()))
        return found

    def figures(self, pid: int) -> _ProcFigures:
        cpu, rss, _ = self.stats[pid]
        read = write = None
        try:
            with open(f"/proc/{pid}/io", "rb") as f:
                counters = dict(line.split(b":", 1) for line in f.read().splitlines() if b":" in line)
            read, write = int(counters[b"read_bytes"]), int(counters[b"write_bytes"])
        except (OSError, KeyError, ValueError):  # not ours to read, or gone
            pass
        return _ProcFigures(cpu, rss, read, write)

    def started(self, pids: Iterable[int]) -> float:
        """When the earliest of ``pids`` started, in seconds since the epoch."""
        since_boot = min((self.stats[pid][2] for pid in pids if pid in self.stats), default=None)
        return time.time() if since_boot is None else _BOOT_TIME + since_boot


class Nvml:
    """The NVIDIA driver, kept initialised between rounds; ``None`` figures where it has none
    (each device read by ``backends/nvml_devices``, which the Slurm task sampler shares)."""

    def __init__(self) -> None:
        self._ready = False
        self._failed_once = False

    def ensure(self) -> bool:
        if self._ready:
            return True
        problem = nvml_devices.start()
        if problem is not None:
            if not self._failed_once and problem.value not in nvml_devices.NO_NVIDIA_GPU:
                log.warning("NVML failed to initialise; real GPUs are not sampled: %s", problem)
            self._failed_once = True
            return False
        self._ready = True
        return True

    def close(self) -> None:
        if self._ready:
            self._ready = False
            try:
                pynvml.nvmlShutdown()
            except pynvml.NVMLError as exc:
                log.debug("NVML shutdown failed: %s", exc)

    def sample(self, gpu: GpuInfo) -> tuple[GpuSample, dict[int, int]]:
        """The device's figures, and the GPU memory (bytes) of each process using it."""
        figures = nvml_devices.read_device(gpu.index)
        if not figures.healthy:
            return GpuSample(gpu.index, gpu.model, gpu.memory_mb, healthy=False), {}
        sample = GpuSample(
            index=gpu.index,
            model=gpu.model,
            memory_total_mb=figures.memory_total_mb if figures.memory_total_mb is not None else gpu.memory_mb,
            util_pct=figures.util_pct,
            memory_used_mb=figures.memory_used_mb,
            temperature_c=figures.temperature_c,
            power_w=figures.power_w,
            ecc_errors=figures.ecc_errors,
            pids=tuple(sorted(figures.process_memory)),
        )
        return sample, figures.process_memory


class LocalSampler:
    """Samples one machine and the tasks running on it, round after round.

    ``leader_of`` answers a task's process group ``(pgid, leader start time)`` (from its
    claim), or None when the task has no process to measure.
    """

    def __init__(
        self,
        node: str,
        gpus: Iterable[GpuInfo],
        state_dir: Path,
        leader_of: Callable[[TaskKey], tuple[int, int] | None],
    ) -> None:
        self.node = node
        self.gpus = tuple(gpus)
        self.state_dir = state_dir
        self.leader_of = leader_of
        self.nvml = Nvml()
        self._node_before: _NodeCounters | None = None
        self._tasks_before: dict[TaskKey, _TaskCounters] = {}

    def sample(self, now: datetime, running: Mapping[TaskKey, tuple[int, ...]]) -> Sampled:
        errors: list[str] = []
        gpus, gpu_memory = self._gpus()
        node = self._node(now, gpus, errors)
        table = ProcessTable() if running else None
        tasks = []
        by_index = {g.index: g for g in gpus}
        for key, indices in running.items():
            leader = self.leader_of(key)
            if leader is None or table is None:
                continue
            task = self._task(now, key, indices, table.tree(*leader), table, by_index, gpu_memory)
            if task is not None:
                tasks.append(task)
        self._tasks_before = {k: v for k, v in self._tasks_before.items() if k in running}
        return Sampled(nodes=(node,), tasks=tuple(tasks), errors=tuple(errors))

    def close(self) -> None:
        self.nvml.close()

    def _gpus(self) -> tuple[list[GpuSample], dict[int, int]]:
        samples: list[GpuSample] = []
        memory: dict[int, int] = {}  # pid -> GPU bytes over every device
        real = [g for g in self.gpus if not g.simulated]
        nvml_ready = bool(real) and self.nvml.ensure()
        for gpu in self.gpus:
            if gpu.simulated:
                samples.append(GpuSample(gpu.index, gpu.model, gpu.memory_mb, simulated=True))
            elif not nvml_ready:
                samples.append(GpuSample(gpu.index, gpu.model, gpu.memory_mb))  # the driver did not answer
            else:
                sample, used = self.nvml.sample(gpu)
                samples.append(sample)
                for pid, nbytes in used.items():
                    memory[pid] = memory.get(pid, 0) + nbytes
        return samples, memory

    def _node(self, now: datetime, gpus: list[GpuSample], errors: list[str]) -> NodeSample:
        mono = time.monotonic()
        cpu = psutil.cpu_times()
        busy = cpu.user + cpu.nice + cpu.system + getattr(cpu, "irq", 0.0) + getattr(cpu, "softirq", 0.0) \
            + getattr(cpu, "steal", 0.0)
        total = busy + cpu.idle + getattr(cpu, "iowait", 0.0)
        rx = tx = 0
        for name, nic in psutil.net_io_counters(pernic=True).items():
            if name != "lo":
                rx, tx = rx + nic.bytes_recv, tx + nic.bytes_sent
        counters = _NodeCounters(mono, busy, total, rx, tx)
        before, self._node_before = self._node_before, counters
        cpu_pct = rx_rate = tx_rate = None
        if before is not None and mono > before.mono:
            span = total - before.cpu_total
            cpu_pct = min(100.0, max(0.0, 100.0 * (busy - before.cpu_busy) / span)) if span > 0 else None
            elapsed = mono - before.mono
            rx_rate = max(0, rx - before.rx_bytes) / elapsed
            tx_rate = max(0, tx - before.tx_bytes) / elapsed
        memory = psutil.virtual_memory()
        try:
            disk_pct: float | None = psutil.disk_usage(str(self.state_dir)).percent
        except OSError as exc:
            disk_pct = None
            errors.append(f"disk use of {self.state_dir}: {exc}")
        return NodeSample(
            node=self.node, at=now, cpu_pct=cpu_pct, load1=os.getloadavg()[0],
            memory_used_mb=(memory.total - memory.available) // _MIB, memory_total_mb=memory.total // _MIB,
            disk_used_pct=disk_pct, net_rx_bytes_per_s=rx_rate, net_tx_bytes_per_s=tx_rate, gpus=tuple(gpus),
        )

    def _task(
        self,
        now: datetime,
        key: TaskKey,
        indices: tuple[int, ...],
        pids: set[int],
        table: ProcessTable,
        gpus: Mapping[int, GpuSample],
        gpu_memory: Mapping[int, int],
    ) -> TaskSample | None:
        figures = [table.figures(pid) for pid in pids]
        if not figures:
            return None
        mono = time.monotonic()
        cpu = sum(f.cpu_seconds for f in figures)
        reads = [f.read_bytes for f in figures]
        writes = [f.write_bytes for f in figures]
        read = None if None in reads else sum(r for r in reads if r is not None)
        write = None if None in writes else sum(w for w in writes if w is not None)
        before = self._tasks_before.get(key)
        self._tasks_before[key] = _TaskCounters(mono, cpu, read, write)
        if before is None:
            # First sight: the average over the task's life so far.
            started = table.started(pids)
            before = _TaskCounters(started, 0.0, 0 if read is not None else None, 0 if write is not None else None)
            elapsed = time.time() - started
        else:
            elapsed = mono - before.mono
        held = [gpus[i] for i in indices if i in gpus]
        real = held and all(not g.simulated for g in held)
        utils = [g.util_pct for g in held]
        return TaskSample(
            job_id=key.job_id, attempt=key.attempt, role=key.role, index=key.index, node=self.node, at=now,
            cpu_cores=max(0.0, cpu - before.cpu_seconds) / elapsed if elapsed > 0 else None,
            memory_mb=sum(f.rss_bytes for f in figures) // _MIB,
            gpus_held=float(len(indices)),
            gpu_util_pct=sum(u for u in utils if u is not None) / len(utils)
            if real and None not in utils else None,
            gpu_memory_mb=sum(gpu_memory.get(pid, 0) for pid in pids) // _MIB if real else None,
            disk_read_bytes_per_s=_rate(read, before.read_bytes, elapsed),
            disk_write_bytes_per_s=_rate(write, before.write_bytes, elapsed),
        )


def _rate(now_value: int | None, before: int | None, elapsed: float) -> float | None:
    if now_value is None or before is None or elapsed <= 0:
        return None
    return max(0, now_value - before) / elapsed
