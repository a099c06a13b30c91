"""Working directories sent with jobs: who uploaded which content, and which job runs in it

``workdirs``: one row per owner and content (``digest``, the SHA-256 of the canonical tar,
``core.workdirs``), its size and number of files; the archive itself is a file named by the
digest, stored once however many owners send it. ``jobs.workdir``: the digest a job's tasks
start in (NULL: none), indexed so that an upload no job uses any more can be found.

Revision ID: 0026
Revises: 0025
"""

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workdirs",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("owner_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("digest", sa.String(71), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("files", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("owner_id", "digest"),
    )
    op.create_index("ix_workdirs_digest", "workdirs", ["digest"])
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("workdir", sa.String(71), nullable=True))
        batch.create_index("ix_jobs_workdir", ["workdir"])
