"""Will what a provider sends a workspace count? The facts behind ``provely connection check``
and ``POST /v1/connections/{provider}/check``.

Two steps, so that no transaction stays open while the provider is read:
:func:`connection_facts` reads the record (the connection's base URL and credential, the
stored events no contract can count, the refused deliveries by reason, the newest event's API
version); :func:`check_findings` then reads the provider's webhook endpoints once with the
stored credential (a list, which changes nothing there: ``endpoint_versions``) and says in one
sentence each what will not count.

Errors: :class:`NoConnection` (a LookupError) when the workspace has no such connection;
``ProviderUnreadable`` (``endpoint_versions``) when the provider cannot be read.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from shared.db.models import Connection, Event, RefusedDelivery
from shared.intake.contracts import uncounted_by_contracts
from shared.intake.endpoint_versions import endpoint_findings
from shared.runtime.settings import Settings
from shared.trust.secrets import decrypt

__all__ = ["ConnectionFacts", "NoConnection", "check_findings", "connection_facts"]


class NoConnection(LookupError):
    """The workspace has no connection to this provider."""


@dataclass(frozen=True, slots=True)
class ConnectionFacts:
    workspace_id: str
    provider: str
    base_url: str
    api_key: str | None = field(repr=False)
    ignored: dict[str, int]
    refused: dict[str, int]
    latest_api_version: str | None


def _ignored(session: Session, workspace_id: str, provider: str) -> dict[str, int]:
    kinds = session.execute(
        select(Event.type, Event.api_version, func.count())
        .where(Event.workspace_id == workspace_id, Event.provider == provider)
        .group_by(Event.type, Event.api_version)
    ).all()
    ignored: Counter[str] = Counter()
    for event_type, version, n in kinds:
        found = uncounted_by_contracts(provider, event_type, version)
        if found is not None:
            ignored[found[1]] += int(n)
    return dict(ignored)


def _refused(session: Session, workspace_id: str, provider: str) -> dict[str, int]:
    return {
        str(reason): int(n)
        for reason, n in session.execute(
            select(RefusedDelivery.reason, func.count())
            .where(
                RefusedDelivery.workspace_id == workspace_id,
                RefusedDelivery.provider == provider,
            )
            .group_by(RefusedDelivery.reason)
        ).all()
    }


def connection_facts(
    session: Session, workspace_id: str, provider: str, *, settings: Settings | None = None
) -> ConnectionFacts:
    """What the record says of the connection and what it received; raises NoConnection."""
    row = session.execute(
        select(Connection).where(
            Connection.workspace_id == workspace_id, Connection.provider == provider
        )
    ).scalar_one_or_none()
    if row is None:
        raise NoConnection(f"workspace {workspace_id} has no {provider} connection")
    latest = session.execute(
        select(Event.api_version)
        .where(Event.workspace_id == workspace_id, Event.provider == provider)
        .order_by(Event.received_at.desc(), Event.id.desc())
        .limit(1)
    ).scalar_one_or_none()
    return ConnectionFacts(
        workspace_id=workspace_id,
        provider=provider,
        base_url=row.base_url,
        api_key=(decrypt(row.api_key_enc, settings=settings).decode() if row.api_key_enc else None),
        ignored=_ignored(session, workspace_id, provider),
        refused=_refused(session, workspace_id, provider),
        latest_api_version=latest,
    )


def check_findings(facts: ConnectionFacts, *, client: httpx.Client | None = None) -> dict[str, Any]:
    """The endpoints the provider lists for the workspace, and ``problems``: one sentence for
    each thing that will not count. Raises ProviderUnreadable."""
    endpoints = endpoint_findings(
        provider=facts.provider,
        workspace_id=facts.workspace_id,
        base_url=facts.base_url,
        api_key=facts.api_key,
        latest_version=facts.latest_api_version,
        client=client,
    )
    problems = list(endpoints["problems"])
    problems += [f"{n} stored events will not count: {why}" for why, n in facts.ignored.items()]
    problems += [f"{n} deliveries refused: {why}" for why, n in facts.refused.items()]
    return {
        "workspace_id": facts.workspace_id,
        "provider": facts.provider,
        **endpoints,
        "ignored_events": facts.ignored,
        "refused_deliveries": facts.refused,
        "problems": problems,
    }
