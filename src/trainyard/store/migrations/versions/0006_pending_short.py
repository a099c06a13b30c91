"""jobs: a waiting job's pending reason in a few words, for the ``yard jobs`` table

The full sentence (``pending_message``) stays for ``yard job``; tables show the short form
(``QUOTA vision 0/2 free, needs 2, #1``) so a list of waiting jobs stays readable.

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("pending_short", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("pending_short")
