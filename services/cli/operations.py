"""CLI: ``provely operations list|show|timeline`` — operations for a terminal.

They read the system of the data directory found from here (``services.cli.system``; never a
new database) and show each operation through the same views as ``GET /v1/operations…``
(``services.ingress.api.views``): a table or a few lines for people, ``--json`` for the API's
document. An operation id that is unknown (in the workspace given) is exit 1; no system, or a
database that cannot be read, exit 2.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import typer

__all__ = ["register", "show_text"]

group = typer.Typer(help="Operations: list, show, timeline (read-only).", no_args_is_help=True)

T = TypeVar("T")

_WORKSPACE = typer.Option(None, "--workspace", "-w", help="Only this workspace's (ws_…).")
_JSON = typer.Option(False, "--json", help="Print the API's JSON document.")


def _fail(message: str, code: int) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


@contextmanager
def _reading() -> Iterator[Any]:
    """A read-only session on the system found from here; errors as one line and exit 2."""
    from sqlalchemy.exc import SQLAlchemyError

    from services.cli.system import exit_when_no_system
    from shared.db.session import get_engine, session_scope

    url = exit_when_no_system()
    try:
        with session_scope(get_engine(url)) as session:
            yield session
    except SQLAlchemyError as exc:
        first = (str(exc).splitlines() or [exc.__class__.__name__])[0]
        raise _fail(f"cannot read the database: {first}", 2) from None


def _one(session: Any, operation_id: str, workspace: str | None) -> Any:
    from sqlalchemy import select

    from shared.db.models import Operation

    query = select(Operation).where(Operation.id == operation_id)
    if workspace is not None:
        query = query.where(Operation.workspace_id == workspace)
    op = session.execute(query).scalar_one_or_none()
    if op is None:
        where = f" in workspace {workspace}" if workspace else ""
        raise _fail(f"no operation {operation_id}{where}", 1)
    return op


def _read(work: Callable[[Any], T]) -> T:
    with _reading() as session:
        return work(session)


@group.command("list")
def list_operations(
    workspace: str | None = _WORKSPACE,
    state: str | None = typer.Option(None, "--state", help="Only operations in this state."),
    limit: int = typer.Option(50, "--limit", min=1, max=1000, help="At most this many."),
    as_json: bool = _JSON,
) -> None:
    """The newest operations first: id, workspace, contract, state, verdict and reason."""
    from sqlalchemy import select

    from services.ingress.api.views import operation_view
    from shared.core.types import OperationState
    from shared.db.models import Operation

    if state is not None and state not in {s.value for s in OperationState}:
        known = ", ".join(s.value for s in OperationState)
        raise _fail(f"--state {state!r} is not a state (one of {known})", 2)

    def work(session: Any) -> list[dict[str, Any]]:
        query = select(Operation)
        if workspace is not None:
            query = query.where(Operation.workspace_id == workspace)
        if state is not None:
            query = query.where(Operation.state == state)
        query = query.order_by(Operation.created_at.desc(), Operation.id.desc()).limit(limit)
        return [
            operation_view(session, op, listed=True).model_dump(mode="json", by_alias=True)
            for op in session.execute(query).scalars()
        ]

    views = _read(work)
    if as_json:
        typer.echo(json.dumps({"data": views}, indent=2))
        return
    typer.echo("id\tworkspace\tcontract\tstate\tverdict\treason\tcreated")
    for v in views:
        contract = f"{v['contract']['id']}@{v['contract']['version']}"
        typer.echo(
            f"{v['id']}\t{v['workspace_id']}\t{contract}\t{v['state']}\t{v['verdict'] or '-'}"
            f"\t{v['reason'] or '-'}\t{v['created_at']}"
        )


@group.command("show")
def show(
    operation_id: str = typer.Argument(..., help="The operation (op_…)."),
    workspace: str | None = _WORKSPACE,
    as_json: bool = _JSON,
) -> None:
    """One operation: state, verdict and reason, what may be claimed, retry guidance."""
    from services.ingress.api.views import operation_view

    view = _read(
        lambda session: operation_view(session, _one(session, operation_id, workspace)).model_dump(
            mode="json", by_alias=True
        )
    )
    if as_json:
        typer.echo(json.dumps(view, indent=2))
        return
    typer.echo(show_text(view))


def _retry_line(retry: dict[str, Any]) -> str:
    line = f"retry      action: {retry['action']}, verification: {retry['verification']}"
    if retry.get("stands_until"):
        line += f" (stands until {retry['stands_until']}, unless evidence contradicts it)"
    return line


def show_text(view: dict[str, Any]) -> str:
    """The lines ``provely operations show`` prints for the API's document of an operation;
    what an agent reads to decide (``blocked_by``, ``retry.stands_until``) is said when set."""
    contract = view["contract"]
    lines = [
        f"operation  {view['id']} (workspace {view['workspace_id']})",
        f"contract   {contract['id']} {contract['version']}",
        f"state      {view['state']}{' (final)' if view['final'] else ''}",
        f"verdict    {view['verdict'] or '-'}  reason {view['reason'] or '-'}",
        f"claim      {view['claim']}",
        _retry_line(view["retry"]),
    ]
    if view.get("blocked_by"):
        lines.append(f"blocked by {view['blocked_by']}")
    if view.get("explanation"):
        lines.append(f"why        {view['explanation']}")
    if view.get("watch_until"):
        lines.append(f"watched    until {view['watch_until']}")
    lines.append(f"created    {view['created_at']}  updated {view['updated_at']}")
    return "\n".join(lines)


def _entry_line(entry: dict[str, Any]) -> str:
    kind = entry["kind"]
    if kind == "transition":
        what = f"{entry.get('from_state') or '-'} -> {entry.get('to_state')}"
        if entry.get("verdict"):
            what += f"  {entry['verdict']} {entry.get('reason') or ''}".rstrip()
        if entry.get("cause"):
            what += f"  ({entry['cause']})"
    elif kind == "observation":
        what = f"{entry.get('channel')} {entry.get('status')}"
        if entry.get("http_status") is not None:
            what += f" HTTP {entry['http_status']}"
    else:
        what = f"{entry.get('type')} {entry.get('event_id')}"
        if entry.get("assurance"):
            what += f" ({entry.get('strategy')}, {entry['assurance']})"
    return f"{entry['at']}  {kind:<11} {what}"


@group.command("timeline")
def timeline(
    operation_id: str = typer.Argument(..., help="The operation (op_…)."),
    workspace: str | None = _WORKSPACE,
    as_json: bool = _JSON,
) -> None:
    """Transitions, readbacks and correlated provider events, in time order."""
    from services.ingress.api.views import timeline_view

    document = _read(
        lambda session: timeline_view(session, _one(session, operation_id, workspace)).model_dump(
            mode="json", exclude_none=True
        )
    )
    if as_json:
        typer.echo(json.dumps(document, indent=2))
        return
    for entry in document["entries"]:
        typer.echo(_entry_line(entry))


def register(app: typer.Typer) -> None:
    """Add the ``operations`` group to the root app."""
    app.add_typer(group, name="operations")
