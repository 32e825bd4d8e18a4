"""Workspaces, API keys and connections: creation, look-up and revocation.

Used by the admin CLI, the API's authentication and the tests. Functions work in the caller's
transaction and never commit. Plain API keys and connection secrets never reach a table: keys
are stored as sha256, secrets encrypted (``shared.trust.secrets``).
"""

from __future__ import annotations

import re
import secrets as random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import bindparam, func, or_, select, update
from sqlalchemy.orm import Session

from shared.db.models import ApiKey, Connection, Workspace
from shared.runtime.settings import Settings, get_settings
from shared.trust.addresses import refused_host
from shared.trust.secrets import (
    api_key_display_prefix,
    encrypt,
    encrypt_webhook_secrets,
    hash_api_key,
    new_api_key,
)

__all__ = [
    "LAST_USED_EVERY",
    "SCOPES",
    "SIGNATURE_SCHEMES",
    "Authenticated",
    "LastAdminKey",
    "TenantError",
    "authenticate",
    "create_api_key",
    "create_workspace",
    "list_api_keys",
    "new_id",
    "record_use",
    "revoke_api_key",
    "set_connection",
]

SCOPES = ("agent", "admin")
SIGNATURE_SCHEMES = ("stripe", "standard_webhooks", "github")


LAST_USED_EVERY = timedelta(minutes=1)
"""How stale a key's ``last_used_at`` may be: a request writes it only when it is older."""


class TenantError(ValueError):
    """A bad admin request: unknown workspace or key, bad scope, bad connection settings."""


class LastAdminKey(TenantError):
    """Revoking this key would leave its workspace without an admin key."""


def new_id(prefix: str) -> str:
    """``<prefix>_`` + 24 random URL-safe characters (opaque, unguessable)."""
    return f"{prefix}_{random.token_urlsafe(18)}"


def _scopes(scope: str) -> str:
    if scope not in SCOPES:
        raise TenantError(f"unknown scope {scope!r} (expected one of: {', '.join(SCOPES)})")
    return "admin,agent" if scope == "admin" else "agent"


def _workspace(session: Session, workspace_id: str) -> Workspace:
    ws = session.get(Workspace, workspace_id)
    if ws is None:
        raise TenantError(f"no workspace {workspace_id}")
    return ws


def create_api_key(
    session: Session,
    workspace_id: str,
    *,
    scope: str = "agent",
    name: str | None = None,
    now: datetime,
) -> tuple[ApiKey, str]:
    """Store a new key (its hash only); return the row and the plain key, shown once."""
    _workspace(session, workspace_id)
    plain = new_api_key()
    row = ApiKey(
        id=new_id("key"),
        workspace_id=workspace_id,
        prefix=api_key_display_prefix(plain),
        key_hash=hash_api_key(plain),
        scopes=_scopes(scope),
        name=name,
        created_at=now,
    )
    session.add(row)
    session.flush()
    return row, plain


def create_workspace(session: Session, name: str, *, now: datetime) -> tuple[Workspace, str]:
    """A new workspace and its first API key (admin scope); returns the plain key once."""
    name = name.strip()
    if not name or len(name) > 200:
        raise TenantError("a workspace name is 1 to 200 characters")
    ws = Workspace(id=new_id("ws"), name=name, created_at=now)
    session.add(ws)
    session.flush()
    _, plain = create_api_key(session, ws.id, scope="admin", name="initial", now=now)
    return ws, plain


def list_api_keys(session: Session, workspace_id: str) -> Sequence[ApiKey]:
    _workspace(session, workspace_id)
    return (
        session.execute(
            select(ApiKey)
            .where(ApiKey.workspace_id == workspace_id)
            .order_by(ApiKey.created_at, ApiKey.id)
        )
        .scalars()
        .all()
    )


def revoke_api_key(
    session: Session,
    key_id: str,
    *,
    now: datetime,
    workspace_id: str | None = None,
    allow_last_admin: bool = False,
) -> ApiKey:
    """Revoke a key (idempotent: revoking it again keeps the first time).

    The workspace's last active admin key is kept (:class:`LastAdminKey`) unless
    ``allow_last_admin``: a workspace with no admin key can no longer manage its keys,
    connections or contracts through the API. The workspace row is locked first, so two
    revocations of its last two admin keys cannot both pass the count."""
    row = session.get(ApiKey, key_id)
    if row is None or (workspace_id is not None and row.workspace_id != workspace_id):
        raise TenantError(f"no API key {key_id}")
    if row.revoked_at is not None:
        return row
    session.execute(select(Workspace.id).where(Workspace.id == row.workspace_id).with_for_update())
    if _is_admin(row.scopes) and not allow_last_admin and _other_admin_keys(session, row) == 0:
        raise LastAdminKey(
            f"{key_id} is the last admin key of workspace {row.workspace_id}: create another "
            "admin key first"
        )
    row.revoked_at = now
    session.flush()
    return row


def _is_admin(scopes: str) -> bool:
    return "admin" in scopes.split(",")


def _other_admin_keys(session: Session, row: ApiKey) -> int:
    """The workspace's active admin keys other than ``row``."""
    return int(
        session.execute(
            select(func.count())
            .select_from(ApiKey)
            .where(
                ApiKey.workspace_id == row.workspace_id,
                ApiKey.id != row.id,
                ApiKey.revoked_at.is_(None),
                ApiKey.scopes.like("%admin%"),
            )
        ).scalar_one()
    )


@dataclass(frozen=True, slots=True)
class Authenticated:
    """The key a request came with: its workspace and scopes, when it was last used, and the
    workspace's own action window (read in the same statement, for the agent API's create)."""

    key_id: str
    workspace_id: str
    scopes: frozenset[str]
    last_used_at: datetime | None = None
    action_window_seconds: int | None = None

    @property
    def admin(self) -> bool:
        return "admin" in self.scopes

    def use_is_stale(self, now: datetime) -> bool:
        """Whether a use at ``now`` must be written: ``last_used_at`` is unset or older than
        :data:`LAST_USED_EVERY`."""
        return self.last_used_at is None or self.last_used_at <= now - LAST_USED_EVERY


_KEY_BY_HASH = (
    select(
        ApiKey.id,
        ApiKey.workspace_id,
        ApiKey.scopes,
        ApiKey.revoked_at,
        ApiKey.last_used_at,
        Workspace.action_window_seconds,
    )
    .join(Workspace, Workspace.id == ApiKey.workspace_id)
    .where(ApiKey.key_hash == bindparam("key_hash"))
)
"""The key of a hash and its workspace's action window: built once and run as Core (no ORM
entity is loaded), as every authenticated request runs it; building and running it through the
ORM each time cost about 0.3 ms of CPU."""


def authenticate(
    session: Session, plain_key: str, *, now: datetime | None = None
) -> Authenticated | None:
    """The workspace of a plain key, or None when it is unknown or revoked.

    With ``now``, the use is recorded in ``last_used_at`` (:func:`record_use`) when the stored
    time is older than :data:`LAST_USED_EVERY` (or unset). Without it nothing is written: a
    caller that authenticates inside a longer transaction records the use after it
    (:meth:`Authenticated.use_is_stale`), so that the key's row is never locked across its work."""
    if not plain_key.startswith("pv_") or len(plain_key) > 200:
        return None
    row = session.connection().execute(_KEY_BY_HASH, {"key_hash": hash_api_key(plain_key)}).first()
    if row is None or row.revoked_at is not None:
        return None
    found = Authenticated(
        row.id,
        row.workspace_id,
        frozenset(row.scopes.split(",")),
        last_used_at=row.last_used_at,
        action_window_seconds=row.action_window_seconds,
    )
    if now is not None and found.use_is_stale(now):
        record_use(session, row.id, now=now)
    return found


def record_use(session: Session, key_id: str, *, now: datetime) -> None:
    """Set the key's ``last_used_at`` to ``now`` unless it is newer than :data:`LAST_USED_EVERY`
    ago: one ``UPDATE`` per key and minute, not per request; its ``WHERE`` repeats the
    condition, so requests racing on the same key write it once."""
    stale = now - LAST_USED_EVERY
    session.execute(
        update(ApiKey)
        .where(
            ApiKey.id == key_id,
            or_(ApiKey.last_used_at.is_(None), ApiKey.last_used_at <= stale),
        )
        .values(last_used_at=now)
        .execution_options(synchronize_session=False)
    )


_URL_HOST = re.compile(r"^https?://[^/?#@\s]+(?:[/?#]\S*)?$")
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_RESERVED_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "accept", "te", "upgrade"}
)


def set_connection(
    session: Session,
    workspace_id: str,
    *,
    provider: str,
    webhook_secrets: Sequence[str],
    api_key: str | None,
    base_url: str,
    signature_scheme: str,
    signature_tolerance_seconds: int = 300,
    auth_scheme: str = "bearer",
    auth_header: str | None = None,
    rate_limit_per_second: float | None = None,
    settings: Settings | None = None,
    allow_private_network: bool = False,
    now: datetime,
) -> Connection:
    """Create or replace the workspace's connection to ``provider`` (secrets encrypted).

    A base URL on a link-local or cloud metadata host is refused unless
    ``allow_private_network`` (or ``PROVELY_ALLOW_PRIVATE_NETWORK``) says so
    (``shared.trust.addresses``)."""
    _workspace(session, workspace_id)
    if not webhook_secrets or any(not s for s in webhook_secrets):
        raise TenantError("at least one non-empty webhook secret is required")
    if signature_scheme not in SIGNATURE_SCHEMES:
        raise TenantError(
            f"unknown signature scheme {signature_scheme!r} "
            f"(expected one of: {', '.join(SIGNATURE_SCHEMES)})"
        )
    if signature_tolerance_seconds < 1:
        raise TenantError("the signature tolerance is at least 1 second")
    if not base_url.startswith(("https://", "http://")):
        raise TenantError(f"base URL {base_url!r} is not an http(s) URL")
    if not _URL_HOST.match(base_url):
        raise TenantError(f"base URL {base_url!r} names no host")
    refused = refused_host(base_url)
    allowed = allow_private_network or (settings or get_settings()).allow_private_network
    if refused is not None and not allowed:
        raise TenantError(
            f"base URL {base_url!r} is refused: {refused}; readbacks would send the "
            "connection's credential there. Pass --allow-private-network "
            "(PROVELY_ALLOW_PRIVATE_NETWORK=true) if this is really the provider"
        )
    if auth_header is not None and (
        not _HEADER_NAME.match(auth_header) or auth_header.lower() in _RESERVED_HEADERS
    ):
        raise TenantError(f"{auth_header!r} cannot carry the credential: name an HTTP header")
    secrets_enc = encrypt_webhook_secrets(list(webhook_secrets), settings=settings)
    key_enc = encrypt(api_key.encode("utf-8"), settings=settings) if api_key else None
    row = session.execute(
        select(Connection).where(
            Connection.workspace_id == workspace_id, Connection.provider == provider
        )
    ).scalar_one_or_none()
    if row is None:
        row = Connection(
            id=new_id("conn"), workspace_id=workspace_id, provider=provider, created_at=now
        )
        session.add(row)
    row.base_url = base_url.rstrip("/")
    row.signature_scheme = signature_scheme
    row.signature_tolerance_seconds = signature_tolerance_seconds
    row.webhook_secrets_enc = secrets_enc
    row.api_key_enc = key_enc
    row.auth_scheme = auth_scheme
    row.auth_header = auth_header
    row.rate_limit_per_second = rate_limit_per_second
    row.updated_at = now
    session.flush()
    return row
