"""jobs: declared maximum run time per attempt, and the estimated start of a waiting job

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("max_runtime_seconds", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("pending_eta", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("pending_eta")
        batch.drop_column("max_runtime_seconds")
