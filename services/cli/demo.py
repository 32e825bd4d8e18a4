"""CLI: ``provely demo`` (and ``provely up``, registered from :mod:`services.cli.up`).

``provely demo`` starts the embedded system (as ``provely up`` does, on free ports, in a fresh
temporary data directory unless ``--data-dir``) and Stripe sandboxes, then plays an agent
(:mod:`services.cli.scenarios`): by default one refund that Provely proves, showing the lifecycle
as it happens, the conditions as evaluated and the receipt verified. ``--scenario NAME``
(repeatable) and ``--all`` run the traps concurrently, each with its verdict and why.
Exit 0 only when every verdict is the expected one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from services.cli.embedded import EmbeddedSystem
    from services.cli.scenarios import Outcome, Sandbox
    from shared.runtime.settings import Settings

__all__ = ["EmbeddedDemoSystem", "register"]

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


class CommandFailed(RuntimeError):
    """An admin command run for the demo failed (the message is its error line)."""


@dataclass
class EmbeddedDemoSystem:
    """The embedded system plus in-process sandboxes: the demo's launcher (a ``System``)."""

    data_dir: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    _system: EmbeddedSystem | None = None

    @property
    def api_url(self) -> str:
        assert self._system is not None
        return self._system.api_url

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    def __enter__(self) -> EmbeddedDemoSystem:
        from services.cli.embedded import EmbeddedSystem
        from services.cli.scenarios import write_short_timing_skill
        from services.cli.spawn import free_port

        env = write_short_timing_skill(self.data_dir / "demo-skill")
        existing = os.environ.get("PROVELY_CONTRACT_PATHS")
        if existing:
            env["PROVELY_CONTRACT_PATHS"] = f"{existing}:{env['PROVELY_CONTRACT_PATHS']}"
        existing_keys = os.environ.get("PROVELY_TRUSTED_PUBLISHER_KEYS")
        if existing_keys:
            env["PROVELY_TRUSTED_PUBLISHER_KEYS"] = (
                f"{existing_keys}:{env['PROVELY_TRUSTED_PUBLISHER_KEYS']}"
            )
        env.update(
            {
                "PROVELY_SWEEPER_INTERVAL_SECONDS": "0.5",
                "PROVELY_SWEEPER_GRACE_SECONDS": "2",
                "PROVELY_JITTER_RATIO": "0",
                "PROVELY_LOG_JSON": "true",
            }
        )
        env.update(self.extra_env)
        self._system = EmbeddedSystem(
            data_dir=self.data_dir,
            port=free_port(),
            env=env,
            log_dir=self.log_dir,
            echo=lambda _line: None,
        )
        self._stack.callback(self._system.stop)
        self._system.start()  # services boot while the scenarios set up their workspaces
        return self

    def wait_ready(self) -> None:
        assert self._system is not None
        self._system.wait_ready()

    def __exit__(self, *exc: object) -> None:
        self._stack.close()

    def _settings(self) -> Settings:
        from shared.runtime.settings import Settings

        assert self._system is not None
        env = self._system.child_env()
        return Settings(
            data_dir=Path(env["PROVELY_DATA_DIR"]),
            database_url=env["PROVELY_DATABASE_URL"],
            broker_url=env["PROVELY_BROKER_URL"],
        )

    def create_workspace(self, name: str) -> tuple[str, str]:
        """What ``provely workspace create`` does, in this process (no interpreter to start)."""
        from datetime import UTC, datetime

        from shared.db.session import get_engine, session_scope
        from shared.db.tenants import create_workspace

        settings = self._settings()
        with session_scope(get_engine(settings.resolved_database_url())) as session:
            workspace, api_key = create_workspace(session, name, now=datetime.now(UTC))
            return workspace.id, api_key

    def connect_stripe(
        self, workspace_id: str, *, webhook_secret: str, api_key: str, base_url: str
    ) -> None:
        """What ``provely connection set --provider stripe`` does, in this process."""
        from datetime import UTC, datetime

        from shared.db.session import get_engine, session_scope
        from shared.db.tenants import set_connection
        from shared.lifecycle.operations import provider_skill

        settings = self._settings()
        skill = provider_skill("stripe")
        if skill is None:
            raise CommandFailed("the Stripe skill is not loaded")
        with session_scope(get_engine(settings.resolved_database_url())) as session:
            set_connection(
                session,
                workspace_id,
                provider="stripe",
                webhook_secrets=[webhook_secret],
                api_key=api_key,
                base_url=base_url,
                signature_scheme=skill.signature_scheme or "stripe",
                signature_tolerance_seconds=skill.signature_tolerance_seconds or 300,
                rate_limit_per_second=skill.rate_limit_per_second,
                settings=settings,
                now=datetime.now(UTC),
            )

    def connect_http(self, workspace_id: str, *, base_url: str) -> None:
        """What ``provely connection set --provider http`` does: read back the user's app."""
        import base64
        import secrets
        from datetime import UTC, datetime

        from shared.db.session import get_engine, session_scope
        from shared.db.tenants import set_connection

        settings = self._settings()
        # The app sends no webhooks to Provely; the connection still holds a secret.
        secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode("ascii")
        with session_scope(get_engine(settings.resolved_database_url())) as session:
            set_connection(
                session,
                workspace_id,
                provider="http",
                webhook_secrets=[secret],
                api_key=None,
                base_url=base_url,
                signature_scheme="standard_webhooks",
                settings=settings,
                now=datetime.now(UTC),
            )

    def new_sandbox(self) -> Sandbox:
        from services.cli.scenarios import DEFAULT_SANDBOX_OPTIONS, Sandbox
        from services.sandbox.runner import run_sandbox

        running = self._stack.enter_context(run_sandbox(**DEFAULT_SANDBOX_OPTIONS))
        return Sandbox(base_url=running.base_url, api_key=running.api_key)

    def log_tail(self, lines: int = 15) -> str:
        chunks = []
        for path in sorted(self.log_dir.glob("*.log")):
            text = path.read_text("utf-8", errors="replace").splitlines()[-lines:]
            chunks.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(chunks)


# --------------------------------------------------------------------------------------------
# Display
# --------------------------------------------------------------------------------------------


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


class _Board:
    """What the live display shows; updated by the scenario engine's progress sink."""

    def __init__(self, names: Sequence[str]) -> None:
        from services.cli.scenarios import SCENARIOS

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


def _print_single(console: Console, outcome: Outcome) -> None:
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


def _print_summary(console: Console, outcomes: Sequence[Outcome]) -> None:
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


def _outcome_json(o: Outcome) -> dict[str, Any]:
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


@dataclass
class _Workdir:
    """Where the demo's system keeps its files; a temporary one is removed at the end unless
    ``keep`` (``--keep``, or set when a scenario or the system failed: its logs stay)."""

    path: Path
    keep: bool


@contextlib.contextmanager
def _data_dir(given: Path | None, keep: bool) -> Iterator[_Workdir]:
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield _Workdir(given, keep=True)
        return
    workdir = _Workdir(Path(tempfile.mkdtemp(prefix="provely-demo-")), keep=keep)
    try:
        yield workdir
    finally:
        if not workdir.keep:
            shutil.rmtree(workdir.path, ignore_errors=True)


def demo(
    scenario: list[str] | None = typer.Option(
        None, "--scenario", "-s", help="Scenario to run (repeatable); default: refund."
    ),
    run_all: bool = typer.Option(False, "--all", help="Run every scenario (the traps)."),
    data_dir: Path | None = typer.Option(
        None, "--data-dir", help="Keep the system's files here (default: a fresh temp dir)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the outcomes as JSON."),
    keep: bool = typer.Option(
        False, "--keep", help="Keep the temporary data dir and logs (kept anyway on a failure)."
    ),
    list_only: bool = typer.Option(False, "--list", help="List the scenarios and exit."),
) -> None:
    """Prove a refund end to end on this machine (embedded system + Stripe sandbox)."""
    from rich.console import Console

    from services.cli.scenarios import SCENARIOS
    from services.cli.supervisor import SupervisorError

    console = Console(stderr=as_json)
    if list_only:
        for s in SCENARIOS.values():
            typer.echo(f"{s.name:22} {s.expected.verdict:13} {s.story}")
        return
    names = list(SCENARIOS) if run_all else list(dict.fromkeys(scenario or ["refund"]))
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        typer.echo(
            f"error: unknown scenario {', '.join(unknown)} (one of: {', '.join(SCENARIOS)})",
            err=True,
        )
        raise typer.Exit(2)
    started = time.monotonic()
    board = _Board(names)
    single = len(names) == 1
    with _data_dir(data_dir, keep) as workdir:
        directory = workdir.path
        console.print(f"[dim]starting Provely (embedded: SQLite + local broker) in {directory}[/]")
        system = EmbeddedDemoSystem(directory)
        try:
            with system:
                console.print(
                    f"[dim]Provely API on {system.api_url}; services starting "
                    f"({time.monotonic() - started:.1f} s)[/]"
                )
                outcomes = _run_live(console, board, names, system, single, as_json)
                if not all(o.ok for o in outcomes):
                    workdir.keep = True
                    if not as_json:
                        console.print("[dim]service logs (last lines):[/]")
                        console.print(system.log_tail(), markup=False, highlight=False)
        except (SupervisorError, CommandFailed, OSError, RuntimeError) as exc:
            workdir.keep = True
            typer.echo(f"error: the demo could not run: {exc}", err=True)
            if system.log_dir.is_dir():
                typer.echo(system.log_tail(), err=True)
            typer.echo(f"the system's files and logs are kept in {directory}", err=True)
            raise typer.Exit(1) from None
    wall = time.monotonic() - started
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "ok": all(o.ok for o in outcomes),
                    "wall_s": round(wall, 1),
                    "outcomes": [_outcome_json(o) for o in outcomes],
                },
                indent=2,
            )
        )
    else:
        if single:
            _print_single(console, outcomes[0])
        else:
            _print_summary(console, outcomes)
        passed = sum(o.ok for o in outcomes)
        console.print(
            f"{passed}/{len(outcomes)} scenarios reached their expected verdict "
            f"in {wall:.1f} s wall time"
        )
    if not all(o.ok for o in outcomes):
        typer.echo(f"the system's files and logs are kept in {directory}", err=True)
        raise typer.Exit(1)


def _run_live(
    console: Console,
    board: _Board,
    names: Sequence[str],
    system: EmbeddedDemoSystem,
    single: bool,
    as_json: bool,
) -> list[Outcome]:
    from rich.live import Live

    from services.cli.scenarios import run_scenarios

    render = board.single if single else board.table
    if as_json:
        return asyncio.run(run_scenarios(names, system, board.sink))
    with Live(get_renderable=render, console=console, refresh_per_second=8, transient=False):
        return asyncio.run(run_scenarios(names, system, board.sink))


def register(app: typer.Typer) -> None:
    """Add ``demo``, ``up`` and ``config`` to the root app."""
    from services.cli import config, up

    app.command("demo")(demo)
    up.register(app)
    config.register(app)
