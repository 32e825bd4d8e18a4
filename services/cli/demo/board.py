"""The demo's live display: one panel of the lifecycle as it happens for a single scenario, a
table of every scenario's progress for several; fed by the scenario engine's progress sink."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import RenderableType

    from services.cli.demo.scenarios.scenario import Outcome

__all__ = ["LIFECYCLE", "VERDICT_STYLE", "Board"]

LIFECYCLE = ("CREATED", "ACTION_STARTED", "ACTION_ACCEPTED", "OBSERVING", "PENDING")
VERDICT_STYLE = {
    "VERIFIED": "bold green",
    "PENDING": "yellow",
    "UNVERIFIABLE": "magenta",
    "CONTRADICTED": "bold red",
    "FAILED": "red",
    "EXPIRED": "red",
    "HUMAN_REVIEW": "bold magenta",
}


@dataclass
class _Row:
    name: str
    title: str
    expected: str
    started: float = field(default_factory=time.monotonic)
    op: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    notes: list[tuple[float, str]] = field(default_factory=list)
    states: list[str] = field(default_factory=list)
    outcome: Outcome | None = None


class Board:
    """What the live display shows; updated by the scenario engine's progress sink."""

    def __init__(self, names: Sequence[str]) -> None:
        from services.cli.demo.scenarios.catalog import SCENARIOS

        self.started = time.monotonic()
        self.rows = {
            n: _Row(
                n,
                SCENARIOS[n].title,
                f"{SCENARIOS[n].expected.verdict} ({SCENARIOS[n].expected.reason})",
            )
            for n in names
        }

    def sink(self, name: str, update: Mapping[str, Any]) -> None:
        row = self.rows[name]
        if "note" in update:
            row.note = str(update["note"])
            row.notes.append((time.monotonic() - self.started, row.note))
        if "op" in update:
            row.op = dict(update["op"])
            state = str(row.op.get("state"))
            if not row.states or row.states[-1] != state:
                row.states.append(state)
        if "done" in update:
            row.outcome = update["done"]

    # ---------------------------------------------------------------- renderables
    def lifecycle(self, row: _Row) -> RenderableType:
        from rich.text import Text

        text = Text()
        current = row.op.get("state")
        reached = LIFECYCLE.index(current) if current in LIFECYCLE else -1
        final_state = current if current not in LIFECYCLE and current else None
        if final_state:
            reached = len(LIFECYCLE)
        for i, state in enumerate(LIFECYCLE):
            seen = i <= reached
            style = "bold cyan" if i == reached else ("green" if seen else "dim")
            text.append(("✔ " if seen and i != reached else "") + state, style=style)
            text.append(" → ", style="dim")
        if final_state:
            text.append(str(final_state), style=VERDICT_STYLE.get(str(final_state), "bold"))
        else:
            text.append("final", style="dim")
        verdict = row.op.get("verdict")
        if verdict:
            text.append(f"\nverdict {verdict}", style=VERDICT_STYLE.get(str(verdict), "bold"))
            text.append(f"  reason {row.op.get('reason')}  final={row.op.get('final')}")
        return text

    def single(self) -> RenderableType:
        from rich.console import Group
        from rich.panel import Panel
        from rich.text import Text

        row = next(iter(self.rows.values()))
        notes = Text()
        for at, note in row.notes[-8:]:
            notes.append(f"{at:6.1f}s  ", style="dim")
            notes.append(note + "\n")
        contract = (row.op.get("contract") or {}).get("id", "")
        return Panel(
            Group(self.lifecycle(row), Text(""), notes),
            title=f"[bold]{row.title}[/]" + (f" — {contract}" if contract else ""),
            subtitle=f"{time.monotonic() - self.started:.1f}s",
        )

    def table(self) -> RenderableType:
        from rich.table import Table

        table = Table(title="Provely demo: the traps", expand=True)
        table.add_column("scenario")
        table.add_column("expected")
        table.add_column("now")
        table.add_column("s", justify="right")
        table.add_column("")
        for row in self.rows.values():
            op = row.op
            now = (
                f"{op.get('state')} · {op.get('verdict')} ({op.get('reason')})" if op else row.note
            )
            mark = ""
            elapsed = time.monotonic() - row.started
            if row.outcome is not None:
                mark = "[green]✔[/]" if row.outcome.ok else "[red]✘[/]"
                elapsed = row.outcome.elapsed_s
            table.add_row(row.name, row.expected, now, f"{elapsed:.1f}", mark)
        return table
