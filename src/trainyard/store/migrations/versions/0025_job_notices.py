"""Job notices: a user is told when their job ends or is preempted

``users.email``: where their notices are e-mailed; ``users.notify``: their default (which
events, e-mail, a webhook) for jobs whose file says nothing. ``job_notices``: one row per
event and channel, queued with the event and sent by the alert tick.

Revision ID: 0025
Revises: 0024
"""

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("email", sa.String(254), nullable=True))
        batch.add_column(sa.Column("notify", sa.JSON(), nullable=True))
    op.create_table(
        "job_notices",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("event_id", sa.Integer(), sa.ForeignKey("job_events.id", ondelete="CASCADE"), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("channel", sa.String(16), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("tries", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.UniqueConstraint("event_id", "channel", name="uq_job_notices_event_id_channel"),
    )
    op.create_index("ix_job_notices_job_id", "job_notices", ["job_id"])
    op.create_index("ix_job_notices_state_id", "job_notices", ["state", "id"])


def downgrade() -> None:
    op.drop_table("job_notices")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("notify")
        batch.drop_column("email")
