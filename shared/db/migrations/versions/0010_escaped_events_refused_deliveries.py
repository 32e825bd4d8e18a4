"""Escaped events and refused deliveries (#33)

- ``events.escaped``: the places of an event's stored body that were escaped so that every
  table can hold it (a NUL character, a lone surrogate, ``1e999``, nesting past the limit);
  NULL for a body stored as the provider sent it. ``events.raw`` stays verbatim either way.
- ``refused_deliveries``: a delivery to a connection refused because its signature failed or
  its body is not a JSON event — the connection, the reason, the answer, the size and the
  time; never the body (a refused delivery is stored nowhere).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02 13:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.add_column(sa.Column("escaped", sa.JSON(), nullable=True))
    op.create_table(
        "refused_deliveries",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("workspace_id", sa.String(40), nullable=False),
        sa.Column("provider", sa.String(64), nullable=False),
        sa.Column("connection_id", sa.String(40), nullable=False),
        sa.Column("reason", sa.String(64), nullable=False),
        sa.Column("http_status", sa.Integer(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index(
        "ix_refused_deliveries_ws_time", "refused_deliveries", ["workspace_id", "received_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_refused_deliveries_ws_time", table_name="refused_deliveries")
    op.drop_table("refused_deliveries")
    with op.batch_alter_table("events") as batch:
        batch.drop_column("escaped")
