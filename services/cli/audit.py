"""CLI: ``provely audit verify`` — walk a workspace's hash-chained transitions.

The chain (``shared.db.audit.verify_chain``) finds an edited, reordered or deleted row anywhere
but at its end. Rows cut from the end leave a chain that still holds, so two checks follow:
every operation of the workspace must have transitions, and its state must be where its last
transition leads (this also catches an operation row edited by hand); and the chain must end at
the head the workspace row recorded when the last row was appended (seq and hash).

Exit 0 when both hold, 1 at the first broken link (named by row id and seq, or by operation),
2 when the check cannot run (unknown workspace, unreachable database).
"""

from __future__ import annotations

import json
from typing import Any

import typer

__all__ = ["register"]

group = typer.Typer(help="The audit trail: hash-chained state transitions.", no_args_is_help=True)

_PROBLEMS = {
    "hash_mismatch": "the row's content no longer matches its hash (edited)",
    "prev_hash_mismatch": "the row does not chain to the row before it (edited or reordered)",
    "seq_gap": "a row is missing before it (deleted)",
    "operation_without_transitions": "the operation has no transition rows (deleted)",
    "head_mismatch": (
        "the chain does not end at the head its workspace recorded (rows cut from its end, "
        "or the head edited)"
    ),
    "state_not_at_last_transition": (
        "the operation's state is not where its last transition leads (rows after it were "
        "deleted, or the state was edited)"
    ),
}


def _verify_workspace(session: Any, workspace_id: str) -> dict[str, Any]:
    from sqlalchemy import func, select

    from shared.db.audit import verify_chain
    from shared.db.models import Transition, Workspace

    if session.get(Workspace, workspace_id) is None:
        return {"workspace_id": workspace_id, "result": "unknown_workspace"}
    count, last = session.execute(
        select(func.count(Transition.id), func.max(Transition.seq)).where(
            Transition.workspace_id == workspace_id
        )
    ).one()
    broken = verify_chain(session, workspace_id)
    result: dict[str, Any] = {
        "workspace_id": workspace_id,
        "transitions": int(count),
        "last_seq": int(last) if last is not None else 0,
    }
    if broken is not None:
        result.update(
            result="broken",
            broken={
                "id": broken.id,
                "seq": broken.seq,
                "operation_id": broken.operation_id,
                "problem": broken.problem,
            },
        )
        return result
    tail = _tail_problem(session, workspace_id) or _head_problem(session, workspace_id)
    if tail is not None:
        result.update(result="broken", broken=tail)
    else:
        result["result"] = "intact"
    return result


def _tail_problem(session: Any, workspace_id: str) -> dict[str, Any] | None:
    """A chain cannot see rows cut from its end: every operation's state must be where its
    last transition leads, and every operation must have one. The first that is not, or None."""
    from sqlalchemy import and_, func, select

    from shared.db.models import Operation, Transition

    last = (
        select(Transition.operation_id, func.max(Transition.seq).label("seq"))
        .where(Transition.workspace_id == workspace_id)
        .group_by(Transition.operation_id)
        .subquery()
    )
    rows = session.execute(
        select(Operation.id, Operation.state, Transition.id, Transition.seq, Transition.to_state)
        .outerjoin(last, last.c.operation_id == Operation.id)
        .outerjoin(
            Transition,
            and_(Transition.workspace_id == workspace_id, Transition.seq == last.c.seq),
        )
        .where(Operation.workspace_id == workspace_id)
        .order_by(Transition.seq.desc().nulls_first(), Operation.id)
    ).all()
    for op_id, state, row_id, seq, to_state in rows:
        if row_id is None:
            return {
                "id": None,
                "seq": None,
                "operation_id": op_id,
                "problem": "operation_without_transitions",
            }
        if to_state != state:
            return {
                "id": row_id,
                "seq": seq,
                "operation_id": op_id,
                "problem": "state_not_at_last_transition",
                "state": state,
                "last_to_state": to_state,
            }
    return None


def _head_problem(session: Any, workspace_id: str) -> dict[str, Any] | None:
    """The workspace row keeps the head its chain was last moved to: the last row must be it."""
    from sqlalchemy import select

    from shared.db.audit import GENESIS_HASH
    from shared.db.models import Transition, Workspace

    head = session.execute(
        select(Workspace.chain_seq, Workspace.chain_hash).where(Workspace.id == workspace_id)
    ).one()
    last = session.execute(
        select(Transition.id, Transition.seq, Transition.hash, Transition.operation_id)
        .where(Transition.workspace_id == workspace_id)
        .order_by(Transition.seq.desc())
        .limit(1)
    ).first()
    seq, digest = (0, GENESIS_HASH) if last is None else (int(last.seq), str(last.hash))
    if (seq, digest) == (int(head.chain_seq), str(head.chain_hash)):
        return None
    return {
        "id": None if last is None else int(last.id),
        "seq": None if last is None else seq,
        "operation_id": None if last is None else str(last.operation_id),
        "problem": "head_mismatch",
        "head_seq": int(head.chain_seq),
    }


def _line(result: dict[str, Any]) -> str:
    workspace = result["workspace_id"]
    if result["result"] == "unknown_workspace":
        return f"cannot check: no workspace {workspace}"
    if result["result"] == "intact":
        return (
            f"intact: workspace {workspace}, {result['transitions']} transitions "
            f"(last seq {result['last_seq']})"
        )
    broken = result["broken"]
    why = _PROBLEMS.get(broken["problem"], broken["problem"])
    if broken["id"] is None:
        return (
            f"broken: workspace {workspace}, operation {broken['operation_id']}: "
            f"{broken['problem']}: {why}"
        )
    if broken["problem"] == "head_mismatch":
        return (
            f"broken: workspace {workspace} records its chain's head at seq "
            f"{broken['head_seq']}, its last transition is seq {broken['seq'] or 0}: "
            f"{broken['problem']}: {why}"
        )
    if broken["problem"] == "state_not_at_last_transition":
        return (
            f"broken: workspace {workspace}, operation {broken['operation_id']} is "
            f"{broken['state']} but its last transition id={broken['id']} seq={broken['seq']} "
            f"leads to {broken['last_to_state']}: {broken['problem']}: {why}"
        )
    return (
        f"broken: workspace {workspace}, first broken link is transition id={broken['id']} "
        f"seq={broken['seq']} (operation {broken['operation_id']}): {broken['problem']}: {why}"
    )


@group.command("verify")
def verify(
    workspace: list[str] = typer.Option([], "--workspace", "-w", help="Workspace id (repeatable)."),
    every: bool = typer.Option(False, "--all", help="Check every workspace."),
    url: str | None = typer.Option(
        None, "--url", help="SQLAlchemy URL (default: PROVELY_DATABASE_URL or the embedded SQLite)."
    ),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per workspace."),
) -> None:
    """Walk the transition chain; exit 1 and name the first broken row when it does not hold."""
    from sqlalchemy import select
    from sqlalchemy.exc import SQLAlchemyError

    from services.cli.system import exit_when_no_system
    from shared.db.models import Workspace
    from shared.db.session import make_engine, session_scope

    if not workspace and not every:
        typer.echo("error: name a workspace with --workspace W (or --all)", err=True)
        raise typer.Exit(2)
    engine = make_engine(exit_when_no_system(url))
    try:
        with session_scope(engine) as session:
            names = list(workspace)
            if every:
                names += [w for w in session.execute(select(Workspace.id)).scalars()]
            results = [_verify_workspace(session, name) for name in dict.fromkeys(names)]
    except SQLAlchemyError as exc:
        typer.echo(f"error: cannot read the database: {str(exc).splitlines()[0]}", err=True)
        raise typer.Exit(2) from None
    finally:
        engine.dispose()
    code = 0
    for result in results:
        if result["result"] == "broken":
            code = 1
        elif result["result"] == "unknown_workspace" and code == 0:
            code = 2
        if as_json:
            typer.echo(json.dumps(result, sort_keys=True))
        else:
            typer.echo(_line(result), err=result["result"] != "intact")
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.add_typer(group, name="audit")
