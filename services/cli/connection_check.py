"""CLI: ``provely connection check`` — will what the provider sends count?

It reads the connection's webhook endpoints from the provider (Stripe lists them, each with the
``api_version`` its events are rendered in; ``null``: the account's default version), the API
versions the registered contracts read, and what the workspace received (stored events no
contract can count, refused deliveries), and says in one sentence each what will not count.
``provely connection set`` runs the same reading of the endpoints after it saves.

Exit codes (the README's rule): 0 nothing found, 1 something will not count, 2 the check could
not run (no such connection, the provider cannot be read, the database cannot be reached).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import typer
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from services.cli.admin import _fail, _print, _run, connection_group
from services.cli.endpoint_versions import ProviderUnreadable, endpoint_findings
from shared.db.models import Connection, Event, RefusedDelivery
from shared.intake.contracts import uncounted_by_contracts
from shared.trust.secrets import decrypt

__all__ = ["register"]


def _received(session: Session, workspace_id: str, provider: str) -> dict[str, Any]:
    """What the workspace received: stored events by what keeps them from counting, refused
    deliveries by reason, and the newest event's API version."""
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
    refused = {
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
    latest = session.execute(
        select(Event.api_version)
        .where(Event.workspace_id == workspace_id, Event.provider == provider)
        .order_by(Event.received_at.desc(), Event.id.desc())
        .limit(1)
    ).scalar_one_or_none()
    return {"ignored": dict(ignored), "refused": refused, "latest_api_version": latest}


def _connection(session: Session, workspace_id: str, provider: str) -> dict[str, Any]:
    row = session.execute(
        select(Connection).where(
            Connection.workspace_id == workspace_id, Connection.provider == provider
        )
    ).scalar_one_or_none()
    if row is None:
        raise _fail(f"workspace {workspace_id} has no {provider} connection", 2)
    api_key = decrypt(row.api_key_enc).decode() if row.api_key_enc else None
    return {
        "base_url": row.base_url,
        "api_key": api_key,
        **_received(session, workspace_id, provider),
    }


@connection_group.command("check")
def connection_check(
    workspace: str = typer.Option(..., "--workspace", help="Workspace id (ws_…)."),
    provider: str = typer.Option("stripe", "--provider", help="The connection's provider."),
) -> None:
    """Say what the provider sends that will not count: endpoints on another API version,
    stored events no contract reads, refused deliveries (exit 1 when any)."""
    found = _run(lambda session, now: _connection(session, workspace, provider))
    try:
        endpoints = endpoint_findings(
            provider=provider,
            workspace_id=workspace,
            base_url=found["base_url"],
            api_key=found["api_key"],
            latest_version=found["latest_api_version"],
        )
    except ProviderUnreadable as exc:
        raise _fail(str(exc), 2) from None
    problems = list(endpoints["problems"])
    problems += [f"{n} stored events will not count: {why}" for why, n in found["ignored"].items()]
    problems += [f"{n} deliveries refused: {why}" for why, n in found["refused"].items()]
    _print(
        {
            "workspace_id": workspace,
            "provider": provider,
            **endpoints,
            "ignored_events": found["ignored"],
            "refused_deliveries": found["refused"],
            "problems": problems,
        }
    )
    if problems:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """The command joins the ``connection`` group of ``services.cli.admin``."""
