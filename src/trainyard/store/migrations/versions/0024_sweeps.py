"""Sweeps: the jobs one submit made from a grid or list of parameters

``sweeps``: the group (owner, name, the job file with its sweep section, how many members
may run at once, the metric to show); ``sweep_members``: each member's index, job and point.

Revision ID: 0024
Revises: 0022
"""

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sweeps",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id"), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("parallel", sa.Integer(), nullable=True),
        sa.Column("metric", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_sweeps_user_id_id", "sweeps", ["user_id", "id"])
    op.create_table(
        "sweep_members",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("sweep_id", sa.Integer(), sa.ForeignKey("sweeps.id", ondelete="CASCADE"), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False,
                  unique=True),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.UniqueConstraint("sweep_id", "index"),
    )


def downgrade() -> None:
    op.drop_table("sweep_members")
    op.drop_index("ix_sweeps_user_id_id", table_name="sweeps")
    op.drop_table("sweeps")
