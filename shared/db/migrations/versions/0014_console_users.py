"""Console users (#36)

- ``console_users``: a person an admin lets into the console of one workspace without handing
  them an admin key: an email unique within the workspace, the scrypt hash of a password the
  server generated (its salt and parameters in the same string), when the user was created,
  last signed in and was disabled. A disabled user is never deleted: reviews name it.
- ``console_sessions.user_id``: the user a session was opened for; ``key_id`` becomes nullable,
  since a session is opened either by an admin key or by a user, never both.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-03 07:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "console_users",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("workspace_id", sa.String(40), nullable=False),
        sa.Column("email", sa.String(254), nullable=False),
        sa.Column("password_hash", sa.String(200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_sign_in_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["workspace_id"],
            ["workspaces.id"],
            name=op.f("fk_console_users_workspace_id_workspaces"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_console_users")),
        sa.UniqueConstraint(
            "workspace_id", "email", name=op.f("uq_console_users_workspace_id_email")
        ),
    )
    with op.batch_alter_table("console_sessions") as batch:
        batch.add_column(sa.Column("user_id", sa.String(40), nullable=True))
        batch.alter_column("key_id", existing_type=sa.String(40), nullable=True)
        batch.create_index(batch.f("ix_console_sessions_user_id"), ["user_id"])


def downgrade() -> None:
    op.execute("DELETE FROM console_sessions WHERE key_id IS NULL")
    with op.batch_alter_table("console_sessions") as batch:
        batch.drop_index(batch.f("ix_console_sessions_user_id"))
        batch.alter_column("key_id", existing_type=sa.String(40), nullable=False)
        batch.drop_column("user_id")
    op.drop_table("console_users")
