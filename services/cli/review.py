"""CLI: ``provely review list|resolve`` — the review queue of a workspace, and a review.

They work on the system of the data directory found from here (``services.cli.system``), as
``provely operations`` does, and call what the console and ``POST /v1/operations/{id}/review``
call (``shared.lifecycle.review``): a review is recorded once in the audit chain and answered
with a signed receipt that supersedes the receipt it follows. Exit codes: 0 done, 1 refused (no
such operation in the workspace, not reviewable, already reviewed), 2 bad input or no system.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import typer

__all__ = ["register"]

group = typer.Typer(
    help="The review queue and reviews: a person decides, a signed receipt answers.",
    no_args_is_help=True,
)

_WORKSPACE = typer.Option(..., "--workspace", "-w", help="The workspace (ws_…).")
_JSON = typer.Option(False, "--json", help="Print JSON.")
VERDICTS = ("VERIFIED", "CONTRADICTED", "FAILED", "UNVERIFIABLE", "EXPIRED")


def _fail(message: str, code: int) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


@contextmanager
def _session() -> Iterator[Any]:
    """A session on the system found from here, committed at the end; one line and exit 2 when
    the database cannot be used."""
    from sqlalchemy.exc import SQLAlchemyError

    from services.cli.system import exit_when_no_system
    from shared.db.session import get_engine, session_scope

    url = exit_when_no_system()
    try:
        with session_scope(get_engine(url)) as session:
            yield session
    except SQLAlchemyError as exc:
        first = (str(exc).splitlines() or [exc.__class__.__name__])[0]
        raise _fail(f"cannot use the database: {first}", 2) from None


@group.command("list")
def list_queue(workspace: str = _WORKSPACE, as_json: bool = _JSON) -> None:
    """What waits for a person: late contradictions, HUMAN_REVIEW, CONTRADICTED, EXPIRED."""
    from services.ingress.api.views import operation_view
    from shared.lifecycle.review import review_queue

    with _session() as session:
        views = [
            operation_view(session, op, listed=True).model_dump(mode="json", by_alias=True)
            for op in review_queue(session, workspace_id=workspace)
        ]
    if as_json:
        typer.echo(json.dumps({"data": views}, indent=2))
        return
    typer.echo("id\tcontract\tstate\tverdict\treason\tsince")
    for v in views:
        typer.echo(
            f"{v['id']}\t{v['contract']['id']}@{v['contract']['version']}\t{v['state']}"
            f"\t{v['verdict'] or '-'}\t{v['reason'] or '-'}\t{v['updated_at']}"
        )


@group.command("resolve")
def resolve(
    operation_id: str = typer.Argument(..., help="The operation (op_…)."),
    workspace: str = _WORKSPACE,
    verdict: str = typer.Option(..., "--verdict", help=f"One of {', '.join(VERDICTS)}."),
    note: str = typer.Option(..., "--note", help="Why (1 to 4,000 characters)."),
    reviewer: str = typer.Option(..., "--reviewer", help="Who decides (recorded as cli:<name>)."),
    as_json: bool = _JSON,
) -> None:
    """Record a review and print its signed receipt's id (or the document with --json)."""
    from sqlalchemy import select

    from shared.db.models import Operation
    from shared.lifecycle.receipts import receipt_document_for
    from shared.lifecycle.review import ReviewRefused, record_review

    if verdict not in VERDICTS:
        raise _fail(f"--verdict {verdict!r} is not one of {', '.join(VERDICTS)}", 2)
    if not note.strip() or len(note) > 4000 or not reviewer.strip() or len(reviewer) > 60:
        raise _fail("--note (up to 4,000 characters) and --reviewer (up to 60) are needed", 2)
    with _session() as session:
        op = session.execute(
            select(Operation)
            .where(Operation.id == operation_id, Operation.workspace_id == workspace)
            .with_for_update()
        ).scalar_one_or_none()
        if op is None:
            raise _fail(f"no operation {operation_id} in workspace {workspace}", 1)
        try:
            done = record_review(
                session,
                op,
                verdict=verdict,
                note=note.strip(),
                reviewer=f"cli:{reviewer.strip()}",
                now=datetime.now(UTC),
            )
        except ReviewRefused as exc:
            raise _fail(str(exc), 1) from None
        document = receipt_document_for(done.receipt)
    if as_json:
        typer.echo(json.dumps(document, indent=2, sort_keys=True))
        return
    typer.echo(
        f"reviewed {operation_id}: {verdict}; receipt {done.receipt.id} follows {done.follows}"
    )


def register(app: typer.Typer) -> None:
    """Add the ``review`` group to the root app."""
    app.add_typer(group, name="review")
