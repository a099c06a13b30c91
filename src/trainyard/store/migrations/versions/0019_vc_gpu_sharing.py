"""virtual_clusters.gpu_sharing: whose fractional GPU shares a VC's jobs may share a device with

``same-user`` (the default, and what every VC made before gets), ``same-group`` or
``anyone`` (``core.sharing``): a shared device lets one job read another's memory.

Revision ID: 0019
Revises: 0018
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("virtual_clusters") as batch:
        batch.add_column(sa.Column("gpu_sharing", sa.String(16), nullable=False, server_default="same-user"))


def downgrade() -> None:
    with op.batch_alter_table("virtual_clusters") as batch:
        batch.drop_column("gpu_sharing")
