"""Monitoring on Slurm: node figures from ``scontrol show node``, and per-task figures sampled
inside the job's step by the task sampler, on the real dev cluster."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta

import psutil
from e2e.server import wait_until
from standins.nvml import FakeNvml

from slurm.cluster import drive, submit
from trainyard.backends.base import TaskKey
from trainyard.backends.slurm.backend import METRICS, SlurmBackend
from trainyard.backends.slurm.commands import parse_records
from trainyard.backends.slurm.nodes import node_sample
from trainyard.core.retention import DEFAULT_RETENTION_TIERS
from trainyard.services import history
from trainyard.store.queries import metrics as metric_queries
from trainyard.store.rows import TaskRow

NODE = ("NodeName=g7 CPUTot=64 CPULoad=12.50 Gres=gpu:a100:2 RealMemory=515000 AllocMem=64000 FreeMem=415000 "
        "State=MIXED Partitions=gpu")


def test_a_node_record_gives_slurms_load_and_memory_and_nothing_invented() -> None:
    [record] = parse_records(NODE + "\n")
    now = datetime.now(UTC)
    sample = node_sample(record, now)
    assert (sample.node, sample.at, sample.load1) == ("g7", now, 12.5)
    assert (sample.memory_used_mb, sample.memory_total_mb) == (100000, 515000)
    assert sample.cpu_pct is None and sample.disk_used_pct is None and sample.net_rx_bytes_per_s is None
    assert [(g.index, g.model, g.util_pct, g.simulated) for g in sample.gpus] == [(0, "a100", None, False),
                                                                                 (1, "a100", None, False)]
    # More free memory than configured (a node that lies about its size): none in use, not less.
    [odd] = parse_records("NodeName=n1 RealMemory=16000 FreeMem=21179 CPULoad=N/A\n")
    assert (node_sample(odd, now).memory_used_mb, node_sample(odd, now).load1) == (0, None)


def test_a_running_tasks_figures_come_from_inside_its_step(world) -> None:
    # A backend on the same state directory re-installs the sampler with a 1-second period.
    SlurmBackend(world.backend.state_dir, sample_interval_seconds=1.0)
    job_id = submit(world, f"""
name: busy
taskRoles:
  main:
    resourcePerInstance: {{gpu: 1, cpu: 1, memoryMB: 256}}
    commands:
      - {sys.executable} -c 'x = bytearray(64 << 20); any(iter(int, 1))'
""")
    drive(world, job_id, states=("RUNNING",))
    key = TaskKey(job_id, 0, "main", 0)
    metrics = world.backend.task_dir(key) / METRICS

    rounds: set[float] = set()

    def second_round() -> bool:  # the second round's rate is over its own period, not the task's life
        if metrics.exists():
            rounds.add(json.loads(metrics.read_text())["at"])
        return len(rounds) >= 2

    wait_until(second_round, timeout=30, what="the task sampler's second round")

    now = datetime.now(UTC)
    sampled = world.backend.sample(now, {key: (0,)})
    [task] = sampled.tasks
    with world.db.session() as s:
        placed = s.query(TaskRow).filter_by(job_id=job_id).one().node
    assert (task.job_id, task.role, task.index, task.node, task.at) == (job_id, "main", 0, placed, now)
    busy = [psutil.Process(pid) for pid in json.loads(metrics.read_text())["pids"] if psutil.pid_exists(pid)]
    assert any("iter(int" in " ".join(p.cmdline()) for p in busy)  # the task's own process, found on its node
    assert task.cpu_cores is not None and task.cpu_cores > 0.1  # a busy loop (on a shared machine)
    assert task.memory_mb is not None and task.memory_mb >= 64  # the 64 MiB it holds
    # This machine has nvidia-ml-py but no NVIDIA driver: NVML does not start, and the GPU figures are n/a.
    assert task.gpu_util_pct is None and task.gpu_memory_mb is None and task.gpus_held == 1.0
    assert "NVML did not start" in (world.backend.task_dir(key) / "sampler.log").read_text()
    assert all(g.util_pct is None and g.temperature_c is None for n in sampled.nodes for g in n.gpus)
    assert {n.node for n in sampled.nodes} == {"n1", "n2", "n3", "n4"}
    assert all(n.load1 is not None and n.memory_total_mb == 16000 for n in sampled.nodes)

    # Through the controller's monitoring tick, into the store.
    monitoring = world.controller.monitoring
    assert monitoring is not None
    monitoring.sample_once()
    with world.db.session() as s:
        [row] = metric_queries.latest_task_samples(s, now - timedelta(minutes=1))
        assert (row.job_id, row.node) == (job_id, placed) and row.cpu_cores and row.memory_mb
        assert len(metric_queries.latest_node_samples(s, now - timedelta(minutes=1))) == 4


def test_a_stale_or_missing_record_is_left_out(world) -> None:
    key = TaskKey(77, 0, "main", 0)
    world.backend.task_dir(key).mkdir(parents=True)
    assert world.backend.sample(datetime.now(UTC), {key: ()}).tasks == ()
    old = {"at": datetime.now(UTC).timestamp() - 3600, "node": "n1", "cpu_cores": 1.0, "memory_mb": 5}
    (world.backend.task_dir(key) / METRICS).write_text(json.dumps(old))
    assert world.backend.sample(datetime.now(UTC), {key: ()}).tasks == ()


def test_a_gpu_tasks_figures_come_from_nvml_on_its_node(world) -> None:
    """The task sampler reads the step's GPUs (Slurm's SLURM_STEP_GPUS) through NVML — here
    THE NVML stand-in, shared with the step's python3 — and its figures reach the task's
    sample, the node's GPUs, the store and the job's metrics as on the local backend."""
    machine, state = FakeNvml(), world.tmp / "nvml.json"
    world.backend.commands.env = {**world.backend.commands.env, **machine.share(state)}  # what sbatch passes on
    SlurmBackend(world.backend.state_dir, sample_interval_seconds=1.0)
    job_id = submit(world, f"""
name: gpus
taskRoles:
  main:
    resourcePerInstance: {{gpu: 2, cpu: 1, memoryMB: 256}}
    commands:
      - {sys.executable} -c 'any(iter(int, 1))'
""")
    drive(world, job_id, states=("RUNNING",))
    key = TaskKey(job_id, 0, "main", 0)
    metrics = world.backend.task_dir(key) / METRICS

    def record() -> dict | None:
        return json.loads(metrics.read_text()) if metrics.exists() else None

    first = wait_until(lambda: (r := record()) and r["gpus"] and r, timeout=30, what="the sampler's GPU figures")
    ids = sorted(g["index"] for g in first["gpus"])  # the GPUs Slurm gave the step
    assert len(ids) == 2 and first["gpu_memory_mb"] == 0
    with world.db.session() as s:
        [row] = s.query(TaskRow).filter(TaskRow.job_id == job_id).all()
        assert ids == sorted(g[0] for g in row.gpus)  # pinned: the very GPUs Trainyard gave the task
    [busy] = [pid for pid in first["pids"] if "iter(int" in " ".join(psutil.Process(pid).cmdline())]
    mib = 1024 * 1024
    one, two = (machine.gpus[i] for i in ids)
    one.util, one.memory_used, one.processes = 90, 5000 * mib, {busy: 3000 * mib, 1: 2000 * mib}  # and a stranger's
    two.util, two.processes, two.temperature, two.power_mw, two.ecc_uncorrected = 30, {busy: 1000 * mib}, 66, 250_000, 3
    machine.share(state)
    wait_until(lambda: (r := record()) and r["gpu_memory_mb"] == 4000, timeout=30, what="the task's GPU memory")

    now = datetime.now(UTC)
    sampled = world.backend.sample(now, {key: (0, 1)})
    [task] = sampled.tasks
    assert (task.gpu_util_pct, task.gpu_memory_mb, task.gpus_held) == (60, 4000, 2.0)
    [node] = [n for n in sampled.nodes if n.node == task.node]
    by_index = {g.index: g for g in node.gpus}
    assert (by_index[ids[0]].util_pct, by_index[ids[0]].memory_used_mb, by_index[ids[0]].memory_total_mb) \
        == (90, 5000, 81559)
    assert (by_index[ids[1]].temperature_c, by_index[ids[1]].power_w, by_index[ids[1]].ecc_errors) == (66, 250, 3)
    assert all(g.util_pct is None for i, g in by_index.items() if i not in ids)  # no task measured those
    assert all(g.util_pct is None for n in sampled.nodes if n.node != task.node for g in n.gpus)

    monitoring = world.controller.monitoring
    assert monitoring is not None
    monitoring.sample_once()
    with world.db.session() as s:
        answer = history.read_job_metrics(s, job_id, history.window(None, None, datetime.now(UTC)),
                                          retention=DEFAULT_RETENTION_TIERS, now=datetime.now(UTC))
    [series] = answer.tasks
    assert (series.points[-1].gpuUtilPct, series.points[-1].gpuMemoryMB) == (60, 4000)

    # A device NVML reports lost: unhealthy, and the task's utilisation is n/a, not half of it.
    two.lost = True
    machine.share(state)
    wait_until(lambda: (r := record()) and r["gpu_util_pct"] is None, timeout=30, what="the lost device")
    sampled = world.backend.sample(datetime.now(UTC), {key: (0, 1)})
    assert sampled.tasks[0].gpu_util_pct is None
    assert [g.healthy for n in sampled.nodes if n.node == task.node for g in n.gpus if g.index == ids[1]] == [False]
