"""Console sessions: signing in with a workspace's admin key, reading and revoking a session,
and counting refused sign-ins.

A session's token travels only in the person's cookie; the table keeps its sha256, so a copy of
the database signs nobody in. Each session carries its own CSRF token (compared on every form
the console receives) and expires ``lifetime`` after it was opened; signing out revokes it for
good. A session is bound to the workspace of the key that opened it, and is refused as soon as
that key is revoked or loses the admin scope.

Refused sign-ins are rows (one per refusal, by client address), not counters in one process:
every ingress process, on PostgreSQL or on the embedded SQLite file, counts the same guesses.
Functions work in the caller's transaction and never commit.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from shared.db.models import ApiKey, ConsoleSession, ConsoleSignIn
from shared.db.tenants import authenticate

__all__ = [
    "SignedIn",
    "open_session",
    "read_session",
    "record_refused_sign_in",
    "refused_sign_ins",
    "revoke_session",
]


@dataclass(frozen=True, slots=True)
class SignedIn:
    """A live console session: its workspace, the admin key behind it and its form token."""

    session_id: str
    workspace_id: str
    key_id: str
    csrf: str


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def open_session(
    session: Session, plain_key: str, *, now: datetime, lifetime: timedelta
) -> tuple[str, SignedIn] | None:
    """A new session for an admin key: ``(token, session)``, or None for any other key."""
    found = authenticate(session, plain_key.strip())
    if found is None or not found.admin:
        return None
    token = secrets.token_urlsafe(32)
    row = ConsoleSession(
        id=_digest(token),
        workspace_id=found.workspace_id,
        key_id=found.key_id,
        csrf=secrets.token_urlsafe(32),
        created_at=now,
        expires_at=now + lifetime,
    )
    session.add(row)
    session.flush()
    return token, SignedIn(row.id, row.workspace_id, row.key_id, row.csrf)


def read_session(session: Session, token: str, *, now: datetime) -> SignedIn | None:
    """The live session of a cookie's token: not expired, not revoked, its key still admin."""
    if not token or len(token) > 200:
        return None
    row = session.execute(
        select(ConsoleSession, ApiKey.scopes, ApiKey.revoked_at)
        .join(ApiKey, ApiKey.id == ConsoleSession.key_id)
        .where(
            ConsoleSession.id == _digest(token),
            ConsoleSession.revoked_at.is_(None),
            ConsoleSession.expires_at > now,
            ApiKey.workspace_id == ConsoleSession.workspace_id,
        )
    ).first()
    if row is None or row.revoked_at is not None or "admin" not in row.scopes.split(","):
        return None
    found: ConsoleSession = row[0]
    return SignedIn(found.id, found.workspace_id, found.key_id, found.csrf)


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
