"""Node labels set by admins (``yard node label``), apart from the backend's

``nodes.labels`` is rewritten by every inventory sync from what the backend or the
configuration reports; ``admin_labels`` holds what admins set through the API, merged over
them (``core/labels.py``; a null value removes a reported label). Nodes start with none.

Revision ID: 0018
Revises: 0017
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("admin_labels", sa.JSON(), nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("admin_labels")
