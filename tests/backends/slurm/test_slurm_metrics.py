"""Monitoring on Slurm: node figures from ``scontrol show node``, and per-task figures sampled
inside the job's step by the task sampler, on the real dev cluster."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta

import psutil
from e2e.server import wait_until

from slurm.cluster import drive, submit
from trainyard.backends.base import TaskKey
from trainyard.backends.slurm.backend import METRICS, SlurmBackend
from trainyard.backends.slurm.commands import parse_records
from trainyard.backends.slurm.nodes import node_sample
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
    assert task.gpu_util_pct is None and task.gpus_held == 1.0  # Slurm's GPUs here are not measured
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
