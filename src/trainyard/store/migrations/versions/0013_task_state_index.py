"""ix_tasks_state: the unfinished tasks (what nodes and VCs hold) found by index

Every page showing the cluster (the portal's home, ``GET /nodes``, ``yard vc list``) and the
controller's cycles ask for the tasks still waiting or running: a few hundred among every
task ever run. Without an index that was a scan of the whole table (10 ms of CPU at 100,000
tasks on SQLite, twice a home page).

Revision ID: 0013
Revises: 0012
"""

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_tasks_state", "tasks", ["state"])


def downgrade() -> None:
    op.drop_index("ix_tasks_state", table_name="tasks")
