"""task_usage_days, usage_days: each task's measured use summed per UTC day

``task_usage_days`` holds, per task and closed day, the four sums the usage report takes from
the monitoring history (``store/queries/usage.measured_use``); ``usage_days`` one row per day
that is closed, written in the same transaction as its totals, so that a day is summed once
or not at all. Kept far longer than the history (``usage_days_keep_days``, 400 by default).

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "usage_days",
        sa.Column("day", sa.Date(), primary_key=True),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("tasks", sa.Integer(), nullable=False),
    )
    op.create_table(
        "task_usage_days",
        sa.Column("day", sa.Date(), sa.ForeignKey("usage_days.day", ondelete="CASCADE"), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(64), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("gpu_seconds_used", sa.Float(), nullable=False),
        sa.Column("gpu_seconds_measured", sa.Float(), nullable=False),
        sa.Column("cpu_core_seconds_used", sa.Float(), nullable=False),
        sa.Column("cpu_seconds_measured", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("day", "job_id", "attempt", "role", "index"),
    )
    op.create_index("ix_task_usage_days_job_day", "task_usage_days", ["job_id", "day"])


def downgrade() -> None:
    op.drop_index("ix_task_usage_days_job_day", table_name="task_usage_days")
    op.drop_table("task_usage_days")
    op.drop_table("usage_days")
