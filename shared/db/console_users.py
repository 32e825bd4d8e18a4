"""Console users: the people an admin lets into a workspace's console without an admin key.

A user is an email unique within its workspace and a password the server generated
(``shared.trust.passwords``: shown once, stored as a salted scrypt hash). A user may sign in,
read the workspace's operations and review them; managing the workspace (keys, connections,
contracts, other users) stays with admin keys. Disabling a user revokes its live sessions in
the same transaction and keeps the row, so the reviews and receipts that name the user keep
naming someone; ``console_sessions.read_session`` checks ``disabled_at`` on every request too.

Functions work in the caller's transaction and never commit.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from shared.db.models import ConsoleSession, ConsoleUser, Workspace
from shared.db.tenants import TenantError, new_id
from shared.trust.passwords import check_password, hash_password, new_password, user_id_of

__all__ = [
    "EMAIL",
    "ConsoleUserExists",
    "check_sign_in",
    "create_console_user",
    "disable_console_user",
    "list_console_users",
    "normalized_email",
]

EMAIL = re.compile(r"^[^@\s]{1,64}@[^@\s]+\.[^@\s]+$")


class ConsoleUserExists(TenantError):
    """The workspace already has a console user with that email."""


def normalized_email(email: str) -> str:
    """``email`` as stored and compared (trimmed, lower case); ``TenantError`` when it is not
    an email address."""
    value = email.strip().lower()
    if len(value) > 254 or not EMAIL.match(value):
        raise TenantError(f"{email!r} is not an email address")
    return value


def create_console_user(
    session: Session, workspace_id: str, *, email: str, now: datetime
) -> tuple[ConsoleUser, str]:
    """A new user of ``workspace_id``: ``(row, plain password)``; the password is nowhere else."""
    if session.get(Workspace, workspace_id) is None:
        raise TenantError(f"no workspace {workspace_id}")
    value = normalized_email(email)
    taken = session.execute(
        select(ConsoleUser.id).where(
            ConsoleUser.workspace_id == workspace_id, ConsoleUser.email == value
        )
    ).first()
    if taken is not None:
        raise ConsoleUserExists(f"this workspace already has a console user {value}")
    user_id = new_id("cu")
    password = new_password(user_id)
    row = ConsoleUser(
        id=user_id,
        workspace_id=workspace_id,
        email=value,
        password_hash=hash_password(password),
        created_at=now,
    )
    session.add(row)
    session.flush()
    return row, password


def list_console_users(session: Session, workspace_id: str) -> Sequence[ConsoleUser]:
    """Every user of ``workspace_id``, disabled ones included, oldest first."""
    return (
        session.execute(
            select(ConsoleUser)
            .where(ConsoleUser.workspace_id == workspace_id)
            .order_by(ConsoleUser.created_at, ConsoleUser.id)
        )
        .scalars()
        .all()
    )


def disable_console_user(
    session: Session, workspace_id: str, user_id: str, *, now: datetime
) -> ConsoleUser:
    """Disable a user of ``workspace_id`` and revoke its live sessions at once; disabling a
    disabled user changes nothing. ``TenantError`` for a user of no such workspace."""
    row = session.execute(
        select(ConsoleUser)
        .where(ConsoleUser.id == user_id, ConsoleUser.workspace_id == workspace_id)
        .with_for_update()
    ).scalar_one_or_none()
    if row is None:
        raise TenantError(f"no console user {user_id}")
    if row.disabled_at is None:
        row.disabled_at = now
    session.execute(
        update(ConsoleSession)
        .where(ConsoleSession.user_id == row.id, ConsoleSession.revoked_at.is_(None))
        .values(revoked_at=now)
    )
    session.flush()
    return row


def check_sign_in(
    session: Session, email: str, password: str, *, now: datetime
) -> ConsoleUser | None:
    """The enabled user that ``email`` and ``password`` name, its ``last_sign_in_at`` moved to
    ``now``; None otherwise. One scrypt derivation whatever the outcome (see
    ``shared.trust.passwords``)."""
    user_id = user_id_of(password)
    row = (
        session.execute(select(ConsoleUser).where(ConsoleUser.id == user_id)).scalar_one_or_none()
        if user_id
        else None
    )
    usable = row is not None and row.disabled_at is None and row.email == email.strip().lower()
    stored = row.password_hash if usable and row is not None else None
    matches = check_password(password, stored)  # derived even when no user matches
    if row is None or not matches:
        return None
    row.last_sign_in_at = now
    return row
