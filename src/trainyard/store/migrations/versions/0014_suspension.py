"""Suspension and the hang watchdog: what the controller needs of a job without its file

``suspendable`` (``preemption: suspend``) and ``watchdog_seconds`` are copied from the job
file at submit, as ``max_runtime_seconds`` is; ``held_by`` names who keeps a job
SUSPENDED; ``attained_gpu_seconds`` is the GPU time its ended attempts received, which
time-sharing orders jobs by (least attained service). Jobs submitted before are neither
suspendable nor watched, and have attained nothing so far.

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("suspendable", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("watchdog_seconds", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("held_by", sa.String(64), nullable=True))
        batch.add_column(sa.Column("attained_gpu_seconds", sa.Double(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("attained_gpu_seconds")
        batch.drop_column("held_by")
        batch.drop_column("watchdog_seconds")
        batch.drop_column("suspendable")
