"""sign_in_limits, web_sessions.token_id: sign-in limits that hold, and revocation that ends sessions

``sign_in_limits`` counts sign-in tries per key (``user:NAME``, ``address:IP``) in a window
that begins at the first: kept in the store, each try counted by one atomic update before
its password is checked, so concurrent tries and a restart do not pass the limit.
``web_sessions.token_id`` is the token a browser signed in with (None: a password), so that
revoking the token ends the session.

Revision ID: 0021
Revises: 0020
"""

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sign_in_limits",
        sa.Column("key", sa.String(160), primary_key=True),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
    )
    op.create_index("ix_sign_in_limits_window_start", "sign_in_limits", ["window_start"])
    with op.batch_alter_table("web_sessions") as batch:
        batch.add_column(sa.Column("token_id", sa.Integer(), nullable=True))
        batch.create_index("ix_web_sessions_token_id", ["token_id"])
    # A session signed in with a token before this revision does not say which: end them
    # (their users sign in again), so that every live session's token can be revoked.
    op.execute("UPDATE web_sessions SET revoked = true WHERE method = 'token' AND revoked = false")


def downgrade() -> None:
    with op.batch_alter_table("web_sessions") as batch:
        batch.drop_index("ix_web_sessions_token_id")
        batch.drop_column("token_id")
    op.drop_index("ix_sign_in_limits_window_start", table_name="sign_in_limits")
    op.drop_table("sign_in_limits")
