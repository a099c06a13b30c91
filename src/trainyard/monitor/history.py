"""The monitoring history: rounds of samples from the backend, kept in the store.

``record`` turns a round (``core.metrics.Sampled``) into raw rows. Downsampling (raw for a
while, then per-minute and per-10-minute averages), retention and the queries over a
window build on these rows (``store/queries/metrics.py``).
"""

from __future__ import annotations

from dataclasses import asdict

from sqlalchemy.orm import Session

from trainyard.core.metrics import NodeSample, Sampled, TaskSample
from trainyard.store.queries import metrics as metric_queries
from trainyard.store.rows import NodeSampleRow, TaskSampleRow


def node_row(sample: NodeSample) -> NodeSampleRow:
    gpus = [{k: v for k, v in asdict(g).items() if k != "pids"} for g in sample.gpus]
    return NodeSampleRow(
        node=sample.node, at=sample.at, step=metric_queries.RAW, cpu_pct=sample.cpu_pct, load1=sample.load1,
        memory_used_mb=sample.memory_used_mb, memory_total_mb=sample.memory_total_mb,
        disk_used_pct=sample.disk_used_pct, net_rx_bytes_per_s=sample.net_rx_bytes_per_s,
        net_tx_bytes_per_s=sample.net_tx_bytes_per_s, gpus=gpus,
    )


def task_row(sample: TaskSample) -> TaskSampleRow:
    return TaskSampleRow(
        job_id=sample.job_id, attempt=sample.attempt, role=sample.role, index=sample.index, node=sample.node,
        at=sample.at, step=metric_queries.RAW, cpu_cores=sample.cpu_cores, memory_mb=sample.memory_mb,
        gpus_held=sample.gpus_held, gpu_util_pct=sample.gpu_util_pct, gpu_memory_mb=sample.gpu_memory_mb,
        disk_read_bytes_per_s=sample.disk_read_bytes_per_s, disk_write_bytes_per_s=sample.disk_write_bytes_per_s,
    )


def record(session: Session, sampled: Sampled) -> None:
    """Store one round of samples as raw rows."""
    metric_queries.add_samples(session, [node_row(n) for n in sampled.nodes], [task_row(t) for t in sampled.tasks])
