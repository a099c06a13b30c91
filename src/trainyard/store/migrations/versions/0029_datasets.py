"""Datasets: named, versioned data that nodes cache for the jobs that read it (issue 35)

``datasets``: a name, its owner (who registered it), its source (``storage:NAME/PATH`` or an
http(s) URL), its version and optional SHA-256. ``dataset_grants``: the users and groups
who may read it besides its owner and the admins.

Revision ID: 0029
Revises: 0028
"""

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "datasets",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("owner_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("version", sa.String(length=128), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_index("ix_datasets_owner_id", "datasets", ["owner_id"])
    op.create_table(
        "dataset_grants",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("dataset_id", sa.Integer(), sa.ForeignKey("datasets.id", ondelete="CASCADE"), nullable=False),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=True),
        sa.Column("group_id", sa.Integer(), sa.ForeignKey("groups.id", ondelete="CASCADE"), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_dataset_grants_dataset_id", "dataset_grants", ["dataset_id"])


def downgrade() -> None:
    op.drop_index("ix_dataset_grants_dataset_id", table_name="dataset_grants")
    op.drop_table("dataset_grants")
    op.drop_index("ix_datasets_owner_id", table_name="datasets")
    op.drop_table("datasets")
