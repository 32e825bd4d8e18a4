"""The ``provely`` command: the composition root that wires every service's CLI together.

Each module under ``services/cli`` owns one group of commands and exposes ``register(app)``.
Modules import heavy dependencies inside their commands so that ``provely --help`` stays fast.
"""

from __future__ import annotations

import typer

from services.cli import (
    admin,
    audit,
    connection_check,
    contracts,
    db,
    deliveries,
    mcp,
    operations,
    receipts,
    review,
    sandbox,
    serve,
    skills,
)
from services.cli.demo import command as demo
from services.cli.help import HelpGroup

__all__ = ["app", "main"]

app = typer.Typer(
    name="provely",
    help="Provely proves that a side effect really happened at a provider.\n\n"
    "Exit codes: 0 ok, 1 a finding (or a refused request), 2 cannot check (usage, settings, "
    "unreadable input, unreachable database).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=HelpGroup,
)


def _installed_version() -> str:
    from importlib.metadata import version as package_version

    return package_version("provely")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"provely {_installed_version()}")
        raise typer.Exit(0)


@app.callback()
def root(
    _version: bool = typer.Option(
        False,
        "--version",
        help="Print the installed Provely version and exit.",
        callback=_print_version,
        is_eager=True,
    ),
) -> None:
    """Provely proves that a side effect really happened at a provider."""


@app.command("version")
def version() -> None:
    """Print the installed Provely version."""
    typer.echo(_installed_version())


for module in (
    contracts,
    db,
    admin,
    connection_check,
    deliveries,
    operations,
    sandbox,
    serve,
    receipts,
    review,
    audit,
    skills,
    demo,
    mcp,
):
    module.register(app)


def main() -> None:
    from pydantic import ValidationError

    from shared.runtime.settings import settings_problems

    try:
        app()
    except ValidationError as exc:
        # A bad PROVELY_* variable is found wherever the settings are first read: any command.
        problems = settings_problems(exc)
        if problems is None:
            raise
        typer.echo(f"error: invalid configuration: {problems}", err=True)
        raise SystemExit(2) from None
