"""alert_rules, alerts: the controller's alert rules (admin-tunable) and what they found

``alert_rules`` holds one row per rule an admin has changed (a rule without a row runs
with its defaults, ``monitor/alerts.py``); ``alerts`` one row per firing of a rule about
one subject (a job or a node), resolved in place, with what was last notified;
``jobs.stop_reason``: why a job was stopped, when its stopper said (an alert's rule).

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.add_column(sa.Column("stop_reason", sa.Text(), nullable=True))
    op.create_table(
        "alert_rules",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("cordon", sa.Boolean(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "alerts",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("rule", sa.String(64), nullable=False),
        sa.Column("subject", sa.String(300), nullable=False),
        sa.Column("job_id", sa.Integer(), nullable=True),
        sa.Column("node", sa.String(255), nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("severity", sa.String(16), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("notified", sa.JSON(), nullable=False),
    )
    op.create_index("ix_alerts_state_rule_subject", "alerts", ["state", "rule", "subject"])
    op.create_index("ix_alerts_job_id", "alerts", ["job_id"])


def downgrade() -> None:
    op.drop_table("alerts")
    op.drop_table("alert_rules")
    with op.batch_alter_table("jobs") as batch_op:
        batch_op.drop_column("stop_reason")
