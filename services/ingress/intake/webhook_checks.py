"""Checking the deliveries of a batch before anything is stored: the connection of each
(workspace, provider) pair is looked up once (:data:`CONNECTION_OF`), its webhook secrets are
decrypted once per ciphertext, and each delivery's signature is verified on the exact bytes and
its body parsed by the skill's event shape (:class:`_Verifier`). :func:`check_delivery` gives the
refused deliveries their answers and hands the accepted ones on to be stored
(``services.ingress.intake.webhook_batches``); a stored one's answer is an :class:`Outcome`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.dialects.postgresql.psycopg import dialect as psycopg_dialect

from shared.core.skill import EventShape
from shared.db.models import Connection
from shared.intake.contracts import event_shape_for, fingerprint_key_names
from shared.intake.parse import MalformedEvent, parse_event
from shared.intake.refusals import Refusal
from shared.intake.results import Delivery, IntakeResult
from shared.runtime.settings import Settings
from shared.trust.secrets import SecretError, decrypt_webhook_secret_list
from shared.trust.signatures import SignatureError, SignatureScheme, UnknownSchemeError, scheme_for
from shared.trust.webhook_secrets import WebhookSecret, verifying

__all__ = [
    "CONNECTION_OF",
    "CONNECTION_OF_PG",
    "Answer",
    "BatchKey",
    "Item",
    "NotFound",
    "Outcome",
    "batch_keys",
    "check_delivery",
]

log = logging.getLogger(__name__)


class NotFound(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Outcome:
    event_id: str
    result: IntakeResult
    event_type: str = ""
    api_version: str | None = None


_SECRETS_CACHE: dict[tuple[bytes, str | None], tuple[WebhookSecret, ...]] = {}
_SECRETS_CACHE_SIZE = 1024


def _connection_secrets(stored: bytes, settings: Settings) -> tuple[WebhookSecret, ...]:
    """The connection's webhook secrets with their end times (a Fernet-encrypted JSON list at
    rest, ``shared.trust.webhook_secrets``).

    Decrypted values are kept in memory by ciphertext, so a rotation (new ciphertext) takes
    effect on the next delivery; an end time is compared with each delivery's arrival
    (:meth:`_Verifier.verified`), never cached as a verdict.
    """
    ciphertext = bytes(stored)
    key = (ciphertext, settings.secret_key)
    found = _SECRETS_CACHE.get(key)
    if found is not None:
        return found
    secrets = tuple(decrypt_webhook_secret_list(ciphertext, settings=settings))
    if len(_SECRETS_CACHE) >= _SECRETS_CACHE_SIZE:
        _SECRETS_CACHE.clear()
    _SECRETS_CACHE[key] = secrets
    return secrets


@dataclass(frozen=True, slots=True)
class Item:
    provider: str
    workspace: str
    body: bytes
    headers: Mapping[str, str]
    now: datetime


# Built once: building the statement costs more than running it.
CONNECTION_OF = select(
    Connection.id,
    Connection.signature_scheme,
    Connection.signature_tolerance_seconds,
    Connection.webhook_secrets_enc,
).where(
    Connection.workspace_id == bindparam("workspace"),
    Connection.provider == bindparam("provider"),
)


# The same statement for the intake's own psycopg connections (PostgreSQL's SQL and psycopg's
# parameter style, rendered once).
CONNECTION_OF_PG = str(CONNECTION_OF.compile(dialect=psycopg_dialect()))  # type: ignore[no-untyped-call]

BatchKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class _Verifier:
    """What checking a delivery to one connection takes, worked out once per batch."""

    scheme: SignatureScheme
    secrets: tuple[WebhookSecret, ...]
    tolerance_s: int
    shape: EventShape
    extra_keys: frozenset[str]

    @classmethod
    def of(cls, settings: Settings, provider: str, connection: Any | None) -> _Verifier:
        """For the connection of a workspace and provider (None: there is none); raises
        NotFound or SecretError."""
        if connection is None:
            raise NotFound
        try:
            scheme = scheme_for(connection.signature_scheme)
        except UnknownSchemeError:
            log.error("connection %s names an unknown signature scheme", connection.id)
            raise NotFound from None
        return cls(
            scheme,
            _connection_secrets(connection.webhook_secrets_enc, settings),
            connection.signature_tolerance_seconds,
            event_shape_for(provider, scheme.name),
            fingerprint_key_names(provider),
        )

    def verified(self, item: Item) -> Delivery:
        """Signature (with the secrets that still verify at the delivery's arrival), then event
        shape; raises SignatureError or MalformedEvent."""
        delivery = self.scheme.verify(
            body=item.body,
            headers=item.headers,
            secrets=verifying(self.secrets, item.now),
            tolerance_s=self.tolerance_s,
            now=item.now,
        )
        event = parse_event(
            item.body,
            shape=self.shape,
            delivery=delivery,
            received_at=item.now,
            extra_keys=self.extra_keys,
        )
        return Delivery(item.workspace, item.provider, event, item.body, item.now)


Answer = Outcome | BaseException
_Checked = tuple[list[Answer | None], list[tuple[int, Delivery]], list[Refusal]]


def batch_keys(items: list[Item]) -> list[BatchKey]:
    """The distinct (workspace, provider) pairs of a batch, in order of arrival."""
    return list(dict.fromkeys((item.workspace, item.provider) for item in items))


def check_delivery(
    settings: Settings, items: list[Item], connections: dict[BatchKey, Any]
) -> _Checked:
    """Verify each delivery of a batch: the refused ones get their answer (and will write
    nothing but a :class:`Refusal` when they reached a connection: the reason, never the
    body), the accepted ones go on to be stored."""
    verifiers: dict[BatchKey, _Verifier | BaseException] = {}
    for (ws, prov), connection in connections.items():
        try:
            verifiers[(ws, prov)] = _Verifier.of(settings, prov, connection)
        except (NotFound, SecretError) as refused:
            verifiers[(ws, prov)] = refused
    answers: list[Answer | None] = [None] * len(items)
    accepted: list[tuple[int, Delivery]] = []
    refusals: list[Refusal] = []
    for index, item in enumerate(items):
        verifier = verifiers[(item.workspace, item.provider)]
        if isinstance(verifier, BaseException):
            answers[index] = verifier
            continue
        try:
            accepted.append((index, verifier.verified(item)))
        except (SignatureError, MalformedEvent) as refused:
            answers[index] = refused
            connection = connections[(item.workspace, item.provider)]
            refusals.append(
                Refusal(
                    item.workspace,
                    item.provider,
                    str(connection.id),
                    refused.reason,
                    400,
                    len(item.body),
                    item.now,
                )
            )
    return answers, accepted, refusals
