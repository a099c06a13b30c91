"""node_latest, task_latest: each node's and each task's newest raw sample

One row per node and per task (job, attempt, role, index), upserted by every monitoring
round beside the history, so that ``/metrics``, the live views and the alert rules read a
small table instead of searching the raw history for the newest row of each. A node's
GPUs are lists, their fields in ``store.rows.LATEST_GPU_FIELDS`` order. Filled here from the
newest raw rows already in the history, so that nothing shows as unmeasured after the
upgrade until the next round.

Revision ID: 0012
Revises: 0011
"""

import json
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

# As ``store.rows`` says them (copied: a migration must not change when the code does).
GPU_FIELDS = ("index", "model", "memory_total_mb", "util_pct", "memory_used_mb", "temperature_c",
              "power_w", "ecc_errors", "simulated", "healthy")
GPU_DEFAULTS: dict[str, Any] = {"simulated": False, "healthy": True}
NODE_FIGURES = ("cpu_pct", "load1", "memory_used_mb", "memory_total_mb", "disk_used_pct",
                "net_rx_bytes_per_s", "net_tx_bytes_per_s")
TASK_KEY = ("job_id", "attempt", "role", "index")
TASK_FIGURES = ("node", "cpu_cores", "memory_mb", "gpus_held", "gpu_util_pct", "gpu_memory_mb",
                "disk_read_bytes_per_s", "disk_write_bytes_per_s")


def upgrade() -> None:
    node_latest = op.create_table(
        "node_latest",
        sa.Column("node", sa.String(255), primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cpu_pct", sa.Float(), nullable=True),
        sa.Column("load1", sa.Float(), nullable=True),
        sa.Column("memory_used_mb", sa.Integer(), nullable=True),
        sa.Column("memory_total_mb", sa.Integer(), nullable=True),
        sa.Column("disk_used_pct", sa.Float(), nullable=True),
        sa.Column("net_rx_bytes_per_s", sa.Float(), nullable=True),
        sa.Column("net_tx_bytes_per_s", sa.Float(), nullable=True),
        sa.Column("gpus", sa.JSON(), nullable=False),
    )
    op.create_index("ix_node_latest_at", "node_latest", ["at"])
    task_latest = op.create_table(
        "task_latest",
        sa.Column("job_id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("attempt", sa.Integer(), primary_key=True),
        sa.Column("role", sa.String(64), primary_key=True),
        sa.Column("index", sa.Integer(), primary_key=True),
        sa.Column("node", sa.String(255), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("cpu_cores", sa.Float(), nullable=True),
        sa.Column("memory_mb", sa.Integer(), nullable=True),
        sa.Column("gpus_held", sa.Float(), nullable=False),
        sa.Column("gpu_util_pct", sa.Float(), nullable=True),
        sa.Column("gpu_memory_mb", sa.Integer(), nullable=True),
        sa.Column("disk_read_bytes_per_s", sa.Float(), nullable=True),
        sa.Column("disk_write_bytes_per_s", sa.Float(), nullable=True),
    )
    op.create_index("ix_task_latest_at", "task_latest", ["at"])
    _fill(node_latest, task_latest)


def _fill(node_latest: sa.Table, task_latest: sa.Table) -> None:
    """The newest raw row of each node and task in the history (the raw tier: an hour by default)."""
    bind = op.get_bind()
    meta = sa.MetaData()
    nodes = sa.Table("node_samples", meta, autoload_with=bind)
    tasks = sa.Table("task_samples", meta, autoload_with=bind)
    newest = (sa.select(nodes.c.node, sa.func.max(nodes.c.at).label("at"))
              .where(nodes.c.step == 0).group_by(nodes.c.node).subquery())
    rows = bind.execute(
        sa.select(nodes.c.node, nodes.c.at, *(nodes.c[f] for f in NODE_FIGURES), nodes.c.gpus)
        .join(newest, (nodes.c.node == newest.c.node) & (nodes.c.at == newest.c.at))
        .where(nodes.c.step == 0)
    )
    filled: dict[str, dict[str, Any]] = {}
    for row in rows.mappings():
        gpus = row["gpus"]
        if isinstance(gpus, str):
            gpus = json.loads(gpus)
        filled[row["node"]] = {  # two rows of one node at one time: either will do
            "node": row["node"], "at": row["at"], **{f: row[f] for f in NODE_FIGURES},
            "gpus": [[gpu.get(f, GPU_DEFAULTS.get(f)) for f in GPU_FIELDS] for gpu in gpus or []],
        }
    if filled:
        bind.execute(node_latest.insert(), list(filled.values()))
    key = [tasks.c[k] for k in TASK_KEY]
    newest = sa.select(*key, sa.func.max(tasks.c.at).label("at")).where(tasks.c.step == 0).group_by(*key).subquery()
    found = bind.execute(
        sa.select(*key, tasks.c.at, *(tasks.c[f] for f in TASK_FIGURES))
        .join(newest, sa.and_(*(tasks.c[k] == newest.c[k] for k in (*TASK_KEY, "at"))))
        .where(tasks.c.step == 0)
    )
    by_task = {tuple(row[k] for k in TASK_KEY): dict(row) for row in found.mappings()}
    if by_task:
        bind.execute(task_latest.insert(), list(by_task.values()))


def downgrade() -> None:
    op.drop_table("task_latest")
    op.drop_table("node_latest")
