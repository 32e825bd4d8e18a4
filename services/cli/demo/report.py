"""What the demo says once the scenarios have played: for one scenario its timeline, conditions,
evidence and verdict; for several a table of verdicts and why; or the outcomes as JSON."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from services.cli.demo.board import VERDICT_STYLE

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from services.cli.demo.scenarios.scenario import Outcome

__all__ = ["outcome_json", "print_single", "print_summary"]


def _conditions_table(op: Mapping[str, Any]) -> RenderableType:
    from rich.table import Table

    table = Table(title="conditions as evaluated", expand=True)
    for column in ("condition", "kind", "holds", "observed", "expected"):
        table.add_column(column)
    for c in op.get("conditions") or []:
        holds = c.get("holds")
        mark = {True: "[green]true[/]", False: "[red]false[/]", None: "[yellow]unknown[/]"}
        table.add_row(
            str(c.get("id")),
            str(c.get("kind")),
            mark.get(holds, str(holds)),
            json.dumps(c.get("observed")),
            json.dumps(c.get("expected")),
        )
    return table


def _evidence_table(op: Mapping[str, Any]) -> RenderableType:
    from rich.table import Table

    table = Table(title="evidence", expand=True)
    for column in ("channel", "level", "status", "observed at"):
        table.add_column(column)
    for e in op.get("evidence") or []:
        table.add_row(
            str(e.get("channel")),
            str(e.get("level")),
            str(e.get("status")),
            str(e.get("observed_at")),
        )
    return table


def _timeline_text(outcome: Outcome) -> str:
    steps = [str(i["to_state"]) for i in outcome.timeline if i.get("kind") == "transition"]
    if not steps:
        steps = [s for s, _, _ in outcome.seen]
    return " → ".join(dict.fromkeys(steps)) if steps else ""


def _timeline_table(outcome: Outcome) -> RenderableType:
    from datetime import datetime

    from rich.table import Table

    table = Table(title="timeline (from GET /v1/operations/{id}/timeline)", expand=True)
    for column in ("+s", "what", "detail"):
        table.add_column(column)
    start: datetime | None = None
    for item in outcome.timeline:
        try:
            at = datetime.fromisoformat(str(item.get("at")).replace("Z", "+00:00"))
        except ValueError:
            continue
        start = start or at
        kind = item.get("kind")
        if kind == "transition":
            what = f"{item.get('from_state') or '∅'} → {item.get('to_state')}"
            detail = f"{item.get('verdict') or ''} {item.get('reason') or ''} ({item.get('cause')})"
        elif kind == "observation":
            what = f"observed {item.get('channel')}"
            detail = f"{item.get('status')} (fence {item.get('fence')})"
        else:
            what = f"event {item.get('type')}"
            detail = f"{item.get('strategy')} / {item.get('assurance')}"
        table.add_row(f"{(at - start).total_seconds():5.2f}", what, detail)
    return table


def print_single(console: Console, outcome: Outcome) -> None:
    op = outcome.operation or {}
    if outcome.timeline:
        console.print(_timeline_table(outcome))
    if op:
        console.print(_conditions_table(op))
        console.print(_evidence_table(op))
    line = _timeline_text(outcome)
    if line:
        console.print(f"lifecycle: {line}")
    _print_verdict(console, outcome)


def _print_verdict(console: Console, outcome: Outcome) -> None:
    from rich.markup import escape

    op = outcome.operation or {}
    verdict = op.get("verdict")
    style = VERDICT_STYLE.get(str(verdict), "bold")
    console.print(
        f"[bold]{outcome.scenario}[/]: [{style}]{verdict}[/] ({op.get('reason')}), "
        f"state {op.get('state')}, final={op.get('final')} — {escape(outcome.why)}"
    )
    retry = op.get("retry") or {}
    if retry:
        console.print(
            f"  retry the action: {retry.get('action')}; "
            f"retry the verification: {retry.get('verification')}"
        )
    if op.get("claim"):
        console.print(
            f"  completion level {op.get('completion_level')}, "
            f"safe_to_claim_complete={op.get('safe_to_claim_complete')}: {escape(op['claim'])}"
        )
    if outcome.receipt is not None:
        mark = (
            "[green]receipt verified[/]" if outcome.receipt_ok else "[red]receipt NOT verified[/]"
        )
        console.print(f"  {mark}: {escape(outcome.receipt)}")
    if outcome.ok:
        console.print(f"  [green]✔ as expected[/] ({outcome.elapsed_s:.1f} s)")
    else:
        console.print(f"  [red]✘ {escape(outcome.error or '')}[/]")


def print_summary(console: Console, outcomes: Sequence[Outcome]) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="verdicts and why", expand=True, show_lines=True)
    for column in ("scenario", "verdict", "why", "retry", "receipt", ""):
        table.add_column(column)
    for o in outcomes:
        op = o.operation or {}
        verdict = op.get("verdict")
        style = VERDICT_STYLE.get(str(verdict), "bold")
        retry = op.get("retry") or {}
        claim = "claim: complete" if op.get("safe_to_claim_complete") else "claim: not complete"
        table.add_row(
            o.scenario,
            f"[{style}]{verdict}[/]\n{op.get('state')}\n{op.get('completion_level')}; {claim}",
            escape(o.why) if o.ok else f"{escape(o.why)}\n[red]{escape(o.error or '')}[/]",
            f"action: {retry.get('action', '?')}\nverification: {retry.get('verification', '?')}",
            "—" if o.receipt_ok is None else ("[green]valid[/]" if o.receipt_ok else "[red]no[/]"),
            "[green]✔[/]" if o.ok else "[red]✘[/]",
        )
    console.print(table)


def outcome_json(o: Outcome) -> dict[str, Any]:
    op = o.operation or {}
    return {
        "scenario": o.scenario,
        "ok": o.ok,
        "expected": {
            "verdict": o.expected.verdict,
            "reason": o.expected.reason,
            "state": o.expected.state,
            "final": o.expected.final,
        },
        "operation_id": op.get("id"),
        "verdict": op.get("verdict"),
        "reason": op.get("reason"),
        "state": op.get("state"),
        "final": op.get("final"),
        "completion_level": op.get("completion_level"),
        "safe_to_claim_complete": op.get("safe_to_claim_complete"),
        "claim": op.get("claim"),
        "why": o.why,
        "others": [
            {
                "operation_id": other.get("id"),
                "verdict": other.get("verdict"),
                "reason": other.get("reason"),
                "state": other.get("state"),
                "final": other.get("final"),
            }
            for other in o.others
        ],
        "receipt_verified": o.receipt_ok,
        "receipt": o.receipt,
        "seen": [list(s) for s in o.seen],
        "error": o.error,
        "elapsed_s": round(o.elapsed_s, 2),
    }
