"""attempts: when an attempt was told to stop (preempted, timed out, stop requested)

With the job's grace period it tells when the attempt's GPUs come free, which the
scheduler uses for the estimated start of a job waiting for a preemption.

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("stop_requested_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("stop_requested_at")
