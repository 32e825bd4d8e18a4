"""CLI: ``provely connection check`` — will what the provider sends count?

It reads the connection's webhook endpoints from the provider (Stripe lists them, each with the
``api_version`` its events are rendered in; ``null``: the account's default version), the API
versions the registered contracts read, and what the workspace received (stored events no
contract can count, refused deliveries), and says in one sentence each what will not count
(``shared.intake.connection_check``, which ``POST /v1/connections/{provider}/check`` runs too).
``provely connection set`` runs the same reading of the endpoints after it saves.

Exit codes (the README's rule): 0 nothing found, 1 something will not count, 2 the check could
not run (no such connection, the provider cannot be read, the database cannot be reached).
"""

from __future__ import annotations

from typing import Any

import typer

from services.cli.admin import _fail, _print, _run, connection_group
from shared.intake.connection_check import (
    ConnectionFacts,
    NoConnection,
    check_findings,
    connection_facts,
)
from shared.intake.endpoint_versions import ProviderUnreadable

__all__ = ["register"]


@connection_group.command("check")
def connection_check(
    workspace: str = typer.Option(..., "--workspace", help="Workspace id (ws_…)."),
    provider: str = typer.Option("stripe", "--provider", help="The connection's provider."),
) -> None:
    """Say what the provider sends that will not count: endpoints on another API version,
    stored events no contract reads, refused deliveries (exit 1 when any)."""

    def facts(session: Any, now: Any) -> ConnectionFacts:
        try:
            return connection_facts(session, workspace, provider)
        except NoConnection as exc:
            raise _fail(str(exc), 2) from None

    found = _run(facts)
    try:
        report = check_findings(found)
    except ProviderUnreadable as exc:
        raise _fail(str(exc), 2) from None
    _print(report)
    if report["problems"]:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """The command joins the ``connection`` group of ``services.cli.admin``."""
