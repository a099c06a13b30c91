"""node_samples, task_samples: the monitoring history (raw and downsampled rows)

``step`` is the seconds a row covers: 0 for a raw sample, else the bucket it averages.
``monitor/`` writes, downsamples and prunes them; nothing else refers to them.

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "node_samples",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("node", sa.String(255), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("cpu_pct", sa.Float(), nullable=True),
        sa.Column("load1", sa.Float(), nullable=True),
        sa.Column("memory_used_mb", sa.Integer(), nullable=True),
        sa.Column("memory_total_mb", sa.Integer(), nullable=True),
        sa.Column("disk_used_pct", sa.Float(), nullable=True),
        sa.Column("net_rx_bytes_per_s", sa.Float(), nullable=True),
        sa.Column("net_tx_bytes_per_s", sa.Float(), nullable=True),
        sa.Column("gpus", sa.JSON(), nullable=False),
    )
    op.create_index("ix_node_samples_node_step_at", "node_samples", ["node", "step", "at"])
    op.create_index("ix_node_samples_step_at", "node_samples", ["step", "at"])
    op.create_table(
        "task_samples",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(64), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(255), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("cpu_cores", sa.Float(), nullable=True),
        sa.Column("memory_mb", sa.Integer(), nullable=True),
        sa.Column("gpus_held", sa.Float(), nullable=False),
        sa.Column("gpu_util_pct", sa.Float(), nullable=True),
        sa.Column("gpu_memory_mb", sa.Integer(), nullable=True),
        sa.Column("disk_read_bytes_per_s", sa.Float(), nullable=True),
        sa.Column("disk_write_bytes_per_s", sa.Float(), nullable=True),
    )
    op.create_index("ix_task_samples_job_step_at", "task_samples", ["job_id", "step", "at"])
    op.create_index("ix_task_samples_node_step_at", "task_samples", ["node", "step", "at"])
    op.create_index("ix_task_samples_step_at", "task_samples", ["step", "at"])


def downgrade() -> None:
    op.drop_table("task_samples")
    op.drop_table("node_samples")
