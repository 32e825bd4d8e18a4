"""A workspace's provider connections as an operator manages them: set one with the provider
skill's defaults, rotate its webhook secret with an overlap, describe it without its secrets.

The API's settings endpoints (``services.ingress.settings``) and ``provely connection`` call
these same functions, in the caller's transaction (nothing here commits). Bad settings raise
``shared.db.tenants.TenantError``; a stored secret that no key opens raises
``shared.trust.secrets.UndecryptableSecret``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from shared.db.models import Connection
from shared.db.tenants import TenantError, set_connection
from shared.lifecycle.contracts import provider_skill
from shared.runtime.settings import Settings
from shared.trust.secrets import decrypt_webhook_secret_list, encrypt_webhook_secret_list
from shared.trust.webhook_secrets import WebhookSecret, rotated

__all__ = [
    "DEFAULT_OVERLAP",
    "MAX_OVERLAP",
    "ConnectionView",
    "configure_connection",
    "connection_view",
    "find_connection",
    "list_connections",
    "rotate_webhook_secret",
]

DEFAULT_OVERLAP = timedelta(hours=24)
"""How long the secrets before a rotation keep verifying when no end is given."""
MAX_OVERLAP = timedelta(days=30)
"""The longest overlap a rotation may ask: an old secret that never ends is no rotation."""


@dataclass(frozen=True, slots=True)
class ConnectionView:
    """What may be shown of a connection: everything but its secrets."""

    id: str
    workspace_id: str
    provider: str
    base_url: str
    signature_scheme: str
    signature_tolerance_seconds: int
    webhook_secrets: tuple[WebhookSecret, ...]
    api_key_set: bool
    auth: str
    created_at: datetime
    updated_at: datetime

    @property
    def webhook_url_path(self) -> str:
        return f"/v1/events/{self.provider}/{self.workspace_id}"


def connection_view(row: Connection, *, settings: Settings | None = None) -> ConnectionView:
    return ConnectionView(
        id=row.id,
        workspace_id=row.workspace_id,
        provider=row.provider,
        base_url=row.base_url,
        signature_scheme=row.signature_scheme,
        signature_tolerance_seconds=row.signature_tolerance_seconds,
        webhook_secrets=tuple(
            decrypt_webhook_secret_list(row.webhook_secrets_enc, settings=settings)
        ),
        api_key_set=row.api_key_enc is not None,
        auth=row.auth_header or "bearer",
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def find_connection(session: Session, workspace_id: str, provider: str) -> Connection | None:
    return session.execute(
        select(Connection).where(
            Connection.workspace_id == workspace_id, Connection.provider == provider
        )
    ).scalar_one_or_none()


def list_connections(session: Session, workspace_id: str) -> list[Connection]:
    return list(
        session.execute(
            select(Connection)
            .where(Connection.workspace_id == workspace_id)
            .order_by(Connection.provider)
        ).scalars()
    )


def configure_connection(
    session: Session,
    workspace_id: str,
    *,
    provider: str,
    webhook_secrets: Sequence[str],
    api_key: str | None,
    base_url: str | None = None,
    signature_scheme: str | None = None,
    signature_tolerance_seconds: int | None = None,
    auth_header: str | None = None,
    allow_private_network: bool = False,
    settings: Settings | None = None,
    now: datetime,
) -> Connection:
    """Create or replace the connection, taking what is not given from the provider's skill
    (base URL, signature scheme and tolerance, rate limit); ``http`` is a generic API with no
    skill and needs a base URL. Raises TenantError."""
    skill = None if provider == "http" else provider_skill(provider)
    if provider == "http" and not base_url:
        raise TenantError("provider http needs a base URL")
    if skill is None and provider != "http" and (not base_url or not signature_scheme):
        raise TenantError(
            f"no skill is loaded for provider {provider!r}: give a base URL and a signature "
            "scheme (or use provider http)"
        )
    url = base_url or (skill.default_base_url if skill else None)
    if not url:
        raise TenantError(f"provider {provider!r} has no default base URL; give one")
    scheme = signature_scheme or (skill.signature_scheme if skill else None) or "standard_webhooks"
    tolerance = signature_tolerance_seconds or (
        skill.signature_tolerance_seconds if skill and skill.signature_tolerance_seconds else 300
    )
    return set_connection(
        session,
        workspace_id,
        provider=provider,
        webhook_secrets=webhook_secrets,
        api_key=api_key,
        base_url=url,
        signature_scheme=scheme,
        signature_tolerance_seconds=tolerance,
        auth_scheme="header" if auth_header else "bearer",
        auth_header=auth_header,
        rate_limit_per_second=skill.rate_limit_per_second if skill else None,
        allow_private_network=allow_private_network,
        settings=settings,
        now=now,
    )


def rotate_webhook_secret(
    session: Session,
    workspace_id: str,
    provider: str,
    *,
    secret: str,
    overlap_until: datetime | None = None,
    settings: Settings | None = None,
    now: datetime,
) -> Connection:
    """Add ``secret`` to the connection; the secrets before it keep verifying until
    ``overlap_until`` (default ``now`` + :data:`DEFAULT_OVERLAP`, at most :data:`MAX_OVERLAP`
    ahead; ``now`` or a time already past ends them at once), then stop. The row is locked
    while the list is rewritten, so two rotations do not lose one another's secret."""
    if not secret or len(secret) > 500:
        raise TenantError("a webhook secret is 1 to 500 characters")
    until = now + DEFAULT_OVERLAP if overlap_until is None else overlap_until
    if until.tzinfo is None:
        raise TenantError("overlap_until needs a time zone (UTC: end it with Z)")
    if until > now + MAX_OVERLAP:
        raise TenantError(
            f"overlap_until is at most {MAX_OVERLAP.days} days from now "
            f"(it was {until.isoformat()})"
        )
    until = max(until, now)  # a time already past ends the secrets before it at once
    row = session.execute(
        select(Connection)
        .where(Connection.workspace_id == workspace_id, Connection.provider == provider)
        .with_for_update()
    ).scalar_one_or_none()
    if row is None:
        raise TenantError(f"workspace {workspace_id} has no {provider} connection")
    current = decrypt_webhook_secret_list(row.webhook_secrets_enc, settings=settings)
    row.webhook_secrets_enc = encrypt_webhook_secret_list(
        rotated(current, new=secret, overlap_until=until, now=now), settings=settings
    )
    row.updated_at = now
    session.flush()
    return row
