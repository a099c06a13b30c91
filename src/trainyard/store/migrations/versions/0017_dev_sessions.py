"""dev_sessions: interactive JupyterLab sessions (``yard dev``, HAI's Studio)

A session is a job (its own row in ``jobs``, scheduled like any other) that runs JupyterLab;
this table marks which jobs are sessions and keeps what only sessions have: their lifetime,
when it ends (set when the session starts, moved by each renewal), and what the controller
last read of their activity (JupyterLab's ``/api/status``), for the idle report and cull.

Revision ID: 0017
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dev_sessions",
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id"), primary_key=True),
        sa.Column("hours", sa.Double(), nullable=False),
        sa.Column("renewals", sa.Integer(), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_activity", sa.DateTime(timezone=True), nullable=True),
        sa.Column("kernels", sa.Integer(), nullable=True),
        sa.Column("connections", sa.Integer(), nullable=True),
        sa.Column("checked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("idle_reported_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("check_error", sa.Text(), nullable=False),
    )
    op.create_index("ix_dev_sessions_expires_at", "dev_sessions", ["expires_at"])


def downgrade() -> None:
    op.drop_table("dev_sessions")
