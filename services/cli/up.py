"""CLI: ``provely up`` — the whole system on one machine, with no external server.

``up`` runs the embedded system (``services.cli.embedded``: a SQLite database and broker under
``PROVELY_DATA_DIR``, each service its own child process, as ``provely serve …`` runs it) and
supervises it (``services.cli.supervisor``): a child that dies is restarted; Ctrl-C or SIGTERM
stops every child gracefully.

Everything durable lives in the data directory: stop, start again, and open operations carry on
from ``next_observation_at`` (the sweeper re-sends what came due meanwhile).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

from services.cli.embedded import EmbeddedSystem
from services.cli.preflight import (
    contracts_problem,
    data_dir_problem,
    database_problem,
    keys_problem,
    port_problem,
)
from services.cli.supervisor import SupervisorError

__all__ = ["register"]


@contextmanager
def _signals_stop(flag: list[bool]) -> Iterator[None]:
    def handler(signum: int, _frame: Any) -> None:
        flag.append(True)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def up(
    data_dir: Path | None = typer.Option(
        None, "--data-dir", help="Where the database and broker live (default: PROVELY_DATA_DIR)."
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address of the HTTP API."),
    port: int = typer.Option(8080, "--port", min=1, max=65535, help="Port of the HTTP API."),
    observer_concurrency: int = typer.Option(2, "--observer-concurrency", min=1),
    verdict_concurrency: int = typer.Option(2, "--verdict-concurrency", min=1),
    log_dir: Path | None = typer.Option(
        None, "--log-dir", help="Write each service's output to DIR/<service>.log."
    ),
) -> None:
    """Run the whole system on this machine (SQLite, embedded broker); Ctrl-C stops it.

    Before it starts anything it checks the settings, the address, the contracts and skills,
    the data directory, the database and the keys, in that order: the first problem is one
    line on stderr and exit 2 (and nothing is made after it)."""
    from shared.runtime.settings import get_settings

    settings = get_settings()  # a bad PROVELY_* value: one line, exit 2 (services.cli.main)
    directory = data_dir or settings.data_dir
    checks: tuple[Callable[[], str | None], ...] = (
        lambda: port_problem(host, port),
        lambda: contracts_problem(settings),
        lambda: data_dir_problem(directory),
        lambda: database_problem(settings.model_copy(update={"data_dir": directory})),
        lambda: keys_problem(settings.model_copy(update={"data_dir": directory})),
    )
    for check in checks:
        problem = check()
        if problem is not None:
            typer.echo(f"error: {problem}", err=True)
            raise typer.Exit(2)
    system = EmbeddedSystem(
        data_dir=directory,
        host=host,
        port=port,
        observer_concurrency=observer_concurrency,
        verdict_concurrency=verdict_concurrency,
        log_dir=log_dir,
        embedded_only=False,
        env={"PROVELY_LOG_JSON": "true" if settings.log_json else "false"},
    )
    stop: list[bool] = []
    with _signals_stop(stop):
        try:
            system.__enter__()
        except SupervisorError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(1) from None
        typer.echo(
            f"Provely is up: API {system.api_url} (data in {directory.resolve()}); "
            "Ctrl-C stops it.",
            err=True,
        )
        if data_dir is not None:
            typer.echo(
                f"Admin commands act on this system with PROVELY_DATA_DIR={directory.resolve()}, "
                "e.g. `provely workspace create NAME`.",
                err=True,
            )
        code = 0
        try:
            assert system.supervisor is not None
            while not stop:
                system.supervisor.poll()
                time.sleep(0.2)
        except SupervisorError as exc:
            typer.echo(f"error: {exc}", err=True)
            code = 1
        finally:
            typer.echo("stopping …", err=True)
            system.__exit__(None, None, None)
            typer.echo("stopped", err=True)
        if code:
            raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add ``up`` to the root app."""
    app.command("up")(up)
