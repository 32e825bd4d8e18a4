"""CLI: ``provely demo`` (and ``provely up``, registered from :mod:`services.cli.up`): the
command's options, the data directory it runs in, the scenarios run live and their report."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from services.cli.demo.board import Board
from services.cli.demo.embedded import CommandFailed, EmbeddedDemoSystem
from services.cli.demo.report import outcome_json, print_single, print_summary

if TYPE_CHECKING:
    from rich.console import Console

    from services.cli.demo.scenarios.scenario import Outcome

__all__ = ["demo", "register"]


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

    from services.cli.demo.scenarios.catalog import SCENARIOS
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
    board = Board(names)
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
                    "outcomes": [outcome_json(o) for o in outcomes],
                },
                indent=2,
            )
        )
    else:
        if single:
            print_single(console, outcomes[0])
        else:
            print_summary(console, outcomes)
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
    board: Board,
    names: Sequence[str],
    system: EmbeddedDemoSystem,
    single: bool,
    as_json: bool,
) -> list[Outcome]:
    from rich.live import Live

    from services.cli.demo.scenarios.running import run_scenarios

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
