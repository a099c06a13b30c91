"""Elastic jobs: a job's most workers, and workers told to leave or to restart

``jobs.elastic_max``: the most instances of the job's elastic role (``instances: {min,
max}``), NULL for a job of fixed size: the controller asks the scheduler to grow such jobs.
``tasks.removed``: a worker beyond the minimum told to leave (a shrink); it ends STOPPED and
its resources return once it has exited. ``tasks.restart``: a worker told to stop and start
again in place (its job's size changed: every worker rendezvous again at the new size);
``tasks.resizes``: how many of its runs such restarts began (not counted as retries).

Revision ID: 0028
Revises: 0027
"""

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("elastic_max", sa.Integer(), nullable=True))
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("removed", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("restart", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("resizes", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("resizes")
        batch.drop_column("restart")
        batch.drop_column("removed")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("elastic_max")
