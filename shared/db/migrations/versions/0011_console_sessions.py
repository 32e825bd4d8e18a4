"""Console sessions and refused sign-ins (#36)

- ``console_sessions``: a person signed in to the console with a workspace's admin key; the
  row is keyed by the sha256 of the cookie's token (the token itself is stored nowhere), holds
  the session's CSRF token, when it expires and when it was revoked (signed out).
- ``console_sign_ins``: one row per refused sign-in, by client address, so that every ingress
  process counts the same guesses (the embedded SQLite system included).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-02 17:45:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "console_sessions",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("workspace_id", sa.String(40), nullable=False),
        sa.Column("key_id", sa.String(40), nullable=False),
        sa.Column("csrf", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["workspace_id"],
            ["workspaces.id"],
            name=op.f("fk_console_sessions_workspace_id_workspaces"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_console_sessions")),
    )
    op.create_index(op.f("ix_console_sessions_workspace_id"), "console_sessions", ["workspace_id"])
    op.create_table(
        "console_sign_ins",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=False,
            autoincrement=True,
        ),
        sa.Column("client", sa.String(64), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_console_sign_ins")),
    )
    op.create_index("ix_console_sign_ins_client_at", "console_sign_ins", ["client", "at"])


def downgrade() -> None:
    op.drop_index("ix_console_sign_ins_client_at", table_name="console_sign_ins")
    op.drop_table("console_sign_ins")
    op.drop_index("ix_console_sessions_workspace_id", table_name="console_sessions")
    op.drop_table("console_sessions")
