"""virtual clusters, groups, grants, per-user quotas; node cordon and labels

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "groups",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "memberships",
        sa.Column("group_id", sa.Integer(), sa.ForeignKey("groups.id", ondelete="CASCADE"), nullable=False),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.PrimaryKeyConstraint("group_id", "user_id"),
    )
    op.create_table(
        "virtual_clusters",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("allow_priority_preemption", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("name"),
    )
    op.create_table(
        "vc_quotas",
        sa.Column("vc_id", sa.Integer(), sa.ForeignKey("virtual_clusters.id", ondelete="CASCADE"), nullable=False),
        sa.Column("gpu_model", sa.String(length=64), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("vc_id", "gpu_model"),
    )
    op.create_table(
        "vc_grants",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("vc_id", sa.Integer(), sa.ForeignKey("virtual_clusters.id", ondelete="CASCADE"), nullable=False),
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=True),
        sa.Column("group_id", sa.Integer(), sa.ForeignKey("groups.id", ondelete="CASCADE"), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_vc_grants_vc_id", "vc_grants", ["vc_id"])
    op.create_table(
        "user_quotas",
        sa.Column("user_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False),
        sa.Column("priority", sa.String(length=16), nullable=False),
        sa.Column("gpu_milli", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("user_id", "priority"),
    )
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("cordoned", sa.Boolean(), nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("labels", sa.JSON(), nullable=False, server_default="{}"))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("labels")
        batch.drop_column("cordoned")
    for table in ("user_quotas", "vc_grants", "vc_quotas", "virtual_clusters", "memberships", "groups"):
        op.drop_table(table)
