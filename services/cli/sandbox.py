"""CLI: ``provely sandbox stripe`` serves the stateful Stripe sandbox (see docs/sandbox.md)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["register"]


class _Order(StrEnum):
    in_order = "in_order"
    reversed = "reversed"
    shuffled = "shuffled"


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    group = typer.Typer(help="Local provider sandboxes for tests, demos and your own app.")
    app.add_typer(group, name="sandbox")

    @group.command("stripe")
    def stripe_sandbox(
        port: Annotated[int, typer.Option(help="Port to listen on.")] = 12111,
        host: Annotated[str, typer.Option(help="Interface to bind (loopback by default).")] = (
            "127.0.0.1"
        ),
        state: Annotated[
            Path | None,
            typer.Option("--state", help="JSON file holding the state across restarts."),
        ] = None,
        settle_ms: Annotated[
            int, typer.Option(min=0, help="Delay before a pending refund reaches its outcome.")
        ] = 1000,
        api_version: Annotated[
            str, typer.Option(help="api_version stamped on events.")
        ] = "2026-08-26",
        default_outcome: Annotated[
            str | None,
            typer.Option(
                help="Refund outcome when a refund has no sandbox_outcome metadata "
                "(default: succeeded)."
            ),
        ] = None,
        duplicate: Annotated[
            int | None,
            typer.Option(min=1, max=20, help="Copies of each webhook delivery (default: 1)."),
        ] = None,
        order: Annotated[
            _Order | None,
            typer.Option(
                help="reversed/shuffled hold deliveries until POST /_sandbox/release "
                "(default: in_order)."
            ),
        ] = None,
        shuffle_seed: Annotated[
            int | None, typer.Option(help="Seed of the shuffled order.")
        ] = None,
        delay_ms: Annotated[
            int | None, typer.Option(min=0, help="Delay before each delivery (default: 0).")
        ] = None,
        drop: Annotated[
            list[str] | None, typer.Option(help="Event type never delivered (repeatable).")
        ] = None,
        clock_offset: Annotated[
            float | None,
            typer.Option(help="Seconds added to the provider clock (created, t=) (default: 0)."),
        ] = None,
        outage_seconds: Annotated[
            float, typer.Option(min=0, help="Answer 503 to the API for this long from start.")
        ] = 0.0,
        retry_base_ms: Annotated[
            int, typer.Option(min=0, help="First retry delay of a failed delivery (doubles).")
        ] = 1000,
        retry_max_attempts: Annotated[
            int, typer.Option(min=1, help="Delivery attempts before giving up.")
        ] = 6,
    ) -> None:
        """Serve a stateful Stripe API with signed webhooks and faults on demand.

        Fault options replace the faults saved in --state; others keep their saved value."""
        import uvicorn
        from pydantic import ValidationError

        from services.sandbox.errors import StateFileError
        from services.sandbox.stripe import create_app

        given: dict[str, object | None] = {
            "duplicate": duplicate,
            "order": order.value if order is not None else None,
            "shuffle_seed": shuffle_seed,
            "delay_ms": delay_ms,
            "drop_types": list(drop) if drop else None,
            "clock_offset_s": clock_offset,
            "default_outcome": default_outcome,
        }
        faults = {name: value for name, value in given.items() if value is not None}
        try:
            sandbox_app = create_app(
                state_file=state,
                settle_ms=settle_ms,
                api_version=api_version,
                faults=faults,
                retry_base_ms=retry_base_ms,
                retry_max_attempts=retry_max_attempts,
            )
        except StateFileError as exc:
            typer.echo(f"error: cannot use the state file: {exc}", err=True)
            raise typer.Exit(2) from None
        except ValidationError as exc:
            problems = "; ".join(f"{e['loc'][0]}: {e['msg']}" for e in exc.errors())
            typer.echo(f"error: invalid option: {problems}", err=True)
            raise typer.Exit(2) from None
        if outage_seconds:
            sandbox = sandbox_app.state.sandbox
            sandbox.faults.outage_until = sandbox.clock.sched() + outage_seconds
        typer.echo(
            f"Stripe sandbox on http://{host}:{port} (any sk_test_ key; control API under "
            f"/_sandbox; state: {state or 'in memory'})",
            err=True,
        )
        try:
            uvicorn.run(sandbox_app, host=host, port=port, log_level="warning")
        except OSError as exc:
            typer.echo(f"error: cannot listen on {host}:{port}: {exc.strerror}", err=True)
            raise typer.Exit(1) from None
