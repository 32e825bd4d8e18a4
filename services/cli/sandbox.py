"""CLI: ``provely sandbox stripe`` serves the stateful Stripe sandbox (see docs/sandbox.md),
printing a live line per request and delivery; ``trigger`` and ``resend`` drive a running one.

``trigger`` and ``resend`` exit 0 when done and 2 when they cannot be done (the sandbox cannot
be reached, or refuses: an unknown event type or event id).
"""

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


def _print_line(line: str) -> None:
    print(line, flush=True)


_URL = Annotated[str, typer.Option("--url", help="Base URL of the running sandbox.")]


def _cannot(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


# pay down (C901): every subcommand a closure; one function each
def register(app: typer.Typer) -> None:  # noqa: C901
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
        quiet: Annotated[
            bool,
            typer.Option("--quiet", "-q", help="Print no live line per request and delivery."),
        ] = False,
    ) -> None:
        """Serve a stateful Stripe API with signed webhooks and faults on demand.

        While it serves, each answered request prints a line `<-- [200] POST /v1/refunds` and
        each delivery attempt `--> refund.created evt_… [200] URL` on standard output, as
        `stripe listen` does. Fault options replace the faults saved in --state; others keep
        their saved value."""
        import uvicorn
        from pydantic import ValidationError

        from services.cli.preflight import port_problem
        from services.sandbox.errors import StateFileError
        from services.sandbox.stripe import create_app

        # Before anything is printed or the state file written: a taken port is exit 2.
        taken = port_problem(host, port)
        if taken is not None:
            typer.echo(f"error: {taken}", err=True)
            raise typer.Exit(2)
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
                live=None if quiet else _print_line,
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
            raise typer.Exit(2) from None

    @group.command("trigger")
    def trigger_event(
        event: Annotated[str, typer.Argument(help="Event type, e.g. refund.updated.")],
        url: _URL = "http://127.0.0.1:12111",
        api_key: Annotated[
            str, typer.Option(help="Any sk_test_ key (the sandbox accepts every one).")
        ] = "sk_test_provely_cli",
    ) -> None:
        """Create the objects EVENT needs on a running sandbox and deliver the events.

        Like `stripe trigger`: `refund.updated` creates a charge, refunds it and settles the
        refund. Prints each object made and each event emitted (type and id)."""
        from services.sandbox.trigger import FIXTURES, TriggerError, trigger

        if event not in FIXTURES:
            raise _cannot(f"no fixture for {event!r}; one of: {', '.join(sorted(FIXTURES))}")
        try:
            done = trigger(url, event, api_key=api_key)
        except TriggerError as exc:
            raise _cannot(str(exc)) from None
        for kind, ident in done.objects.items():
            typer.echo(f"created {kind} {ident}")
        for kind, ident in done.events:
            typer.echo(f"event {kind} {ident}")
        if event not in {kind for kind, _ in done.events}:
            raise _cannot(f"the fixture ran but the sandbox emitted no {event} event")
        typer.echo(f"trigger succeeded: {event}")

    @group.command("resend")
    def resend_event(
        event_id: Annotated[str, typer.Argument(help="Id of an event (evt_…) to deliver again.")],
        url: _URL = "http://127.0.0.1:12111",
        endpoint: Annotated[
            str | None,
            typer.Option(help="Deliver to this endpoint only (we_…); default: every subscriber."),
        ] = None,
    ) -> None:
        """Deliver an existing event again: same id, same bytes (a replay), to its endpoints."""
        import httpx

        from services.sandbox.client import SandboxControl, SandboxControlError

        try:
            with SandboxControl(url) as control:
                queued = control.resend(event_id, endpoint=endpoint)
                control.flush()
                sent = {d["id"]: d for d in control.deliveries(event_id=event_id)}
        except SandboxControlError as exc:
            raise _cannot(str(exc)) from None
        except (httpx.HTTPError, ValueError) as exc:
            raise _cannot(f"cannot reach the sandbox at {url}: {exc}") from None
        if not queued:
            raise _cannot(f"no enabled endpoint is subscribed to {event_id}'s type")
        for delivery_id in queued:
            delivery = sent.get(delivery_id, {})
            attempts = delivery.get("attempts") or [{}]
            answer = attempts[-1].get("status_code") or attempts[-1].get("error") or "pending"
            typer.echo(
                f"resent {event_id} to {delivery.get('endpoint_id', '?')} "
                f"({delivery.get('url', '?')}): [{answer}] {delivery_id}"
            )
