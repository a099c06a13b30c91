"""An index of jobs by owner and state, for the count a submit makes of its owner's waiting jobs

``ix_jobs_user_id_state``: the count (``max_waiting_jobs_per_user``) reads the index alone
instead of every job of the user's in the table, which was a quarter of a submit's time
with a few hundred jobs each (issue 33) and grew with them.

Revision ID: 0027
Revises: 0026
"""

from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_jobs_user_id_state", "jobs", ["user_id", "state"])


def downgrade() -> None:
    op.drop_index("ix_jobs_user_id_state", table_name="jobs")
