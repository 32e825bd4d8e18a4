"""Where a readback goes: the workspace's connection to the provider, never the contract.

The connection row holds the base URL, the encrypted API key (decrypted here with
``shared.trust.secrets``, kept only in memory), how the key is presented and an optional rate
limit; the skill manifest gives the provider's default rate limit.

A decrypted key is kept in the process (:class:`_DecryptedKeys`, at most ``KEPT_KEYS``), found
by what it was decrypted from: its ciphertext and the key material the settings give
(``PROVELY_SECRET_KEY``, or the data dir's key file). A replaced or rotated API key is a new
ciphertext, and a changed secret key is a new entry: neither is served from an older one.
Only what decrypted is kept; a failure is raised again on the next readback.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.observer.http_verifier import HttpTarget
from shared.db.models import Connection
from shared.runtime.bounded import Bounded
from shared.runtime.settings import Settings

__all__ = [
    "KEPT_KEYS",
    "ConnectionMissing",
    "Readback",
    "auth_headers",
    "readback_for",
    "readback_of",
]

log = logging.getLogger(__name__)

KEPT_KEYS = 1024
"""Most decrypted API keys a process keeps (the least recently used goes first)."""


class ConnectionMissing(LookupError):
    """The workspace has no connection for the contract's provider."""


@dataclass(frozen=True, slots=True)
class Readback:
    """A connection resolved for readbacks: the target, and the bucket that paces it."""

    target: HttpTarget
    bucket_key: str
    rate_per_s: float | None = None
    connection_id: str = field(default="")


def auth_headers(scheme: str, api_key: str | None, header: str | None = None) -> dict[str, str]:
    """How the API key is presented: ``bearer``, ``basic`` (key as user), ``header`` or none."""
    if not api_key or scheme == "none":
        return {}
    if scheme == "bearer":
        return {"Authorization": f"Bearer {api_key}"}
    if scheme == "basic":
        token = base64.b64encode(f"{api_key}:".encode()).decode()
        return {"Authorization": f"Basic {token}"}
    if scheme == "header":
        if not header:
            raise ValueError("auth scheme 'header' needs the header name")
        return {header: api_key}
    raise ValueError(f"unknown auth scheme {scheme!r}")


def _skill_rate(provider: str) -> float | None:
    from shared.lifecycle.contracts import provider_skill

    try:
        skill = provider_skill(provider)
    except Exception:  # a registry problem must not stop readbacks; the connection may say
        log.warning("skill of %s unreadable; readbacks not paced by it", provider, exc_info=True)
        return None
    if skill is None or skill.rate_limit_per_second is None:
        return None
    return float(skill.rate_limit_per_second)


class _DecryptedKeys:
    """API keys decrypted already, by ciphertext and key material; bounded, thread-safe."""

    def __init__(self, size: int) -> None:
        self._keys: Bounded[tuple[bytes, str | None, str | None, str | None], str] = Bounded(size)

    def get(self, ciphertext: bytes, settings: Settings) -> str:
        from shared.trust.secrets import decrypt

        # The key file is read only when no secret key is set (shared.trust.secrets).
        key_file_dir = None if settings.secret_key else str(settings.data_dir.resolve())
        key = (ciphertext, settings.secret_key, key_file_dir, settings.database_url)
        return self._keys.get_or_make(
            key, lambda: decrypt(ciphertext, settings=settings).decode("utf-8")
        )


_decrypted = _DecryptedKeys(KEPT_KEYS)


def _api_key(connection: Connection, settings: Settings) -> str | None:
    if connection.api_key_enc is None:
        return None
    return _decrypted.get(bytes(connection.api_key_enc), settings)


def readback_for(
    session: Session, *, workspace_id: str, provider: str, settings: Settings
) -> Readback:
    """The readback target of ``workspace_id``'s connection to ``provider``."""
    connection = session.execute(
        select(Connection).where(
            Connection.workspace_id == workspace_id, Connection.provider == provider
        )
    ).scalar_one_or_none()
    if connection is None:
        raise ConnectionMissing(f"workspace {workspace_id} has no {provider} connection")
    return readback_of(connection, provider=provider, settings=settings)


def readback_of(connection: Connection, *, provider: str, settings: Settings) -> Readback:
    """The readback target of a connection row already loaded (the observer loads the
    workspace's connections with the operation, in one query)."""
    headers = auth_headers(
        connection.auth_scheme, _api_key(connection, settings), connection.auth_header
    )
    rate = connection.rate_limit_per_second or _skill_rate(provider)
    return Readback(
        target=HttpTarget(
            base_url=connection.base_url,
            headers=headers,
            timeout_s=settings.http_timeout_seconds,
            max_bytes=settings.http_max_response_bytes,
        ),
        bucket_key=f"conn:{connection.id}",
        rate_per_s=rate,
        connection_id=connection.id,
    )
