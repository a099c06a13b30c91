"""Borrowing and fair share: per-VC borrowing and lending limits and weight, and which
attempts run on borrowed GPUs

``virtual_clusters.borrow_limit`` / ``lend_limit``: whole GPUs of each model the VC may
borrow beyond its quota / lend of its unused quota (NULL: no limit); ``weight``: its share
of idle GPUs against other borrowers. ``attempts.borrowed``: the attempt started over its
VC's quota, on other VCs' idle guaranteed GPUs, and is reclaimed when they need them.

Revision ID: 0022
Revises: 0021
"""

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("virtual_clusters") as batch:
        batch.add_column(sa.Column("borrow_limit", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("lend_limit", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("weight", sa.Float(), nullable=False, server_default="1.0"))
    with op.batch_alter_table("attempts") as batch:
        batch.add_column(sa.Column("borrowed", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("attempts") as batch:
        batch.drop_column("borrowed")
    with op.batch_alter_table("virtual_clusters") as batch:
        batch.drop_column("weight")
        batch.drop_column("lend_limit")
        batch.drop_column("borrow_limit")
