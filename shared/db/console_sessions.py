"""Console sessions: signing in with a workspace's admin key or as a console user, reading and
revoking a session, and counting refused sign-ins.

A session's token travels only in the person's cookie; the table keeps its sha256, so a copy of
the database signs nobody in. Each session carries its own CSRF token (compared on every form
the console receives) and expires ``lifetime`` after it was opened; signing out revokes it for
good. A session is bound to the workspace of the key or user that opened it, and is refused as
soon as that key is revoked or loses the admin scope, or that user is disabled
(``shared.db.console_users``).

Refused sign-ins are rows (one per refusal, by client address), not counters in one process:
every ingress process, on PostgreSQL or on the embedded SQLite file, counts the same guesses.
Functions work in the caller's transaction and never commit.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, delete, func, select, update
from sqlalchemy.orm import Session

from shared.db.console_users import check_sign_in
from shared.db.models import ApiKey, ConsoleSession, ConsoleSignIn, ConsoleUser
from shared.db.tenants import authenticate

__all__ = [
    "SignedIn",
    "open_session",
    "open_user_session",
    "read_session",
    "record_refused_sign_in",
    "refused_sign_ins",
    "revoke_session",
]


@dataclass(frozen=True, slots=True)
class SignedIn:
    """A live console session: its workspace, who opened it (an admin key, or a console user
    and its email) and its form token."""

    session_id: str
    workspace_id: str
    key_id: str | None
    csrf: str
    user_id: str | None = None
    email: str | None = None

    @property
    def admin(self) -> bool:
        """Whether the session may manage the workspace (opened with an admin key)."""
        return self.key_id is not None

    @property
    def reviewer(self) -> str:
        """Who a review of this session names: the user's id, or the admin key's."""
        return self.user_id or self.key_id or ""


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _open(
    session: Session,
    *,
    workspace_id: str,
    key_id: str | None,
    user_id: str | None,
    now: datetime,
    lifetime: timedelta,
) -> tuple[str, ConsoleSession]:
    token = secrets.token_urlsafe(32)
    row = ConsoleSession(
        id=_digest(token),
        workspace_id=workspace_id,
        key_id=key_id,
        user_id=user_id,
        csrf=secrets.token_urlsafe(32),
        created_at=now,
        expires_at=now + lifetime,
    )
    session.add(row)
    session.flush()
    return token, row


def open_session(
    session: Session, plain_key: str, *, now: datetime, lifetime: timedelta
) -> tuple[str, SignedIn] | None:
    """A new session for an admin key: ``(token, session)``, or None for any other key."""
    found = authenticate(session, plain_key.strip())
    if found is None or not found.admin:
        return None
    token, row = _open(
        session,
        workspace_id=found.workspace_id,
        key_id=found.key_id,
        user_id=None,
        now=now,
        lifetime=lifetime,
    )
    return token, SignedIn(row.id, row.workspace_id, row.key_id, row.csrf)


def open_user_session(
    session: Session, email: str, password: str, *, now: datetime, lifetime: timedelta
) -> tuple[str, SignedIn] | None:
    """A new session for a console user's email and password, or None (an unknown email, a
    wrong password and a disabled user alike, at the same cost: see ``check_sign_in``)."""
    user = check_sign_in(session, email, password, now=now)
    if user is None:
        return None
    token, row = _open(
        session,
        workspace_id=user.workspace_id,
        key_id=None,
        user_id=user.id,
        now=now,
        lifetime=lifetime,
    )
    return token, SignedIn(row.id, row.workspace_id, None, row.csrf, user.id, user.email)


def read_session(session: Session, token: str, *, now: datetime) -> SignedIn | None:
    """The live session of a cookie's token: not expired, not revoked, and its admin key still
    an admin key of the workspace, or its user still enabled in the workspace."""
    if not token or len(token) > 200:
        return None
    row = session.execute(
        select(
            ConsoleSession.id,
            ConsoleSession.workspace_id,
            ConsoleSession.key_id,
            ConsoleSession.user_id,
            ConsoleSession.csrf,
            ApiKey.scopes,
            ApiKey.revoked_at,
            ConsoleUser.email,
            ConsoleUser.disabled_at,
        )
        .outerjoin(
            ApiKey,
            and_(
                ApiKey.id == ConsoleSession.key_id,
                ApiKey.workspace_id == ConsoleSession.workspace_id,
            ),
        )
        .outerjoin(
            ConsoleUser,
            and_(
                ConsoleUser.id == ConsoleSession.user_id,
                ConsoleUser.workspace_id == ConsoleSession.workspace_id,
            ),
        )
        .where(
            ConsoleSession.id == _digest(token),
            ConsoleSession.revoked_at.is_(None),
            ConsoleSession.expires_at > now,
        )
    ).first()
    if row is None or not (_key_live(row) or _user_live(row)):
        return None
    return SignedIn(row.id, row.workspace_id, row.key_id, row.csrf, row.user_id, row.email)


def _key_live(row: Any) -> bool:
    return (
        row.key_id is not None
        and row.scopes is not None
        and row.revoked_at is None
        and "admin" in row.scopes.split(",")
    )


def _user_live(row: Any) -> bool:
    return (
        row.key_id is None
        and row.user_id is not None
        and row.email is not None
        and row.disabled_at is None
    )


def revoke_session(session: Session, session_id: str, *, now: datetime) -> None:
    """Sign out: the session is refused from now on."""
    session.execute(
        update(ConsoleSession)
        .where(ConsoleSession.id == session_id, ConsoleSession.revoked_at.is_(None))
        .values(revoked_at=now)
    )


def record_refused_sign_in(session: Session, client: str, *, now: datetime) -> None:
    """Count one refused sign-in of ``client``; rows older than a day are dropped on the way."""
    session.add(ConsoleSignIn(client=client[:64], at=now))
    session.execute(
        delete(ConsoleSignIn).where(
            ConsoleSignIn.client == client[:64], ConsoleSignIn.at < now - timedelta(days=1)
        )
    )


def refused_sign_ins(session: Session, client: str, *, since: datetime) -> int:
    """How many sign-ins of ``client`` were refused since ``since``."""
    return int(
        session.execute(
            select(func.count())
            .select_from(ConsoleSignIn)
            .where(ConsoleSignIn.client == client[:64], ConsoleSignIn.at >= since)
        ).scalar_one()
    )
