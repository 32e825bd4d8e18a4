"""CLI: ``provely deliveries list`` — what a workspace's webhook endpoints received, newest
first: stored (and why no contract can count it, when none can) and refused (the reason, never
the body). The same page as ``GET /v1/deliveries``, read from the database.

Exit codes: 0 listed, 2 the database cannot be read or the cursor is not one this printed.
"""

from __future__ import annotations

import json
from typing import Any

import typer

from services.cli.admin import _fail, _run
from services.ingress.api.deliveries import decode_cursor, delivery_page
from services.ingress.problems import ApiError

__all__ = ["register"]

deliveries_group = typer.Typer(help="Webhook deliveries received.", no_args_is_help=True)


@deliveries_group.command("list")
def deliveries_list(
    workspace: str = typer.Option(..., "--workspace", help="Workspace id (ws_…)."),
    provider: str | None = typer.Option(None, "--provider", help="One connection's provider."),
    outcome: str | None = typer.Option(None, "--outcome", help="stored | refused"),
    limit: int = typer.Option(50, "--limit", min=1, max=200, help="Deliveries per page."),
    cursor: str | None = typer.Option(None, "--cursor", help="next_cursor of a page."),
) -> None:
    """List the deliveries received, newest first (JSON, as ``GET /v1/deliveries``)."""
    if outcome not in (None, "stored", "refused"):
        raise _fail("--outcome is stored or refused", 2)
    try:
        after = decode_cursor(cursor) if cursor is not None else None
    except ApiError:
        raise _fail("--cursor is not one this command printed", 2) from None

    def work(session: Any, now: Any) -> dict[str, Any]:
        page = delivery_page(
            session,
            workspace_id=workspace,
            provider=provider,
            outcome=outcome,
            limit=limit,
            after=after,
        )
        return page.model_dump(mode="json")

    typer.echo(json.dumps(_run(work), indent=2))


def register(app: typer.Typer) -> None:
    """Add the ``deliveries`` group to the root app."""
    app.add_typer(deliveries_group, name="deliveries")
