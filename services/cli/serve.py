"""CLI: ``provely serve ingress|observer|verdict|sweeper`` — one production service per process.

- ``ingress``: the HTTP API and webhook intake under uvicorn (``--workers`` processes);
  ``--metrics-port`` (or ``PROVELY_METRICS_PORT``) serves its Prometheus metrics, aggregated
  over the worker processes, on a port of its own: never on the public API port.
  Its server limits (request head and body deadlines, keep-alive, concurrency) come from
  the ``PROVELY_INGRESS_*`` settings (``services.ingress.server``).
- ``observer`` / ``verdict``: Celery workers consuming only their own queues (``observe`` and
  ``correlate`` / ``verdict``), so each scales on its own; ``observer --queues correlate`` runs
  a worker that only correlates webhook events. ``--metrics-port`` (or
  ``PROVELY_METRICS_PORT``) serves the worker's Prometheus metrics, aggregated over its pool
  processes.
- ``sweeper``: the loop that re-sends overdue observations, applies deadlines and correlates
  webhook events whose message was lost.
- ``metrics``: the database-wide gauges (operations by state), counted in the database at each
  scrape. One process exports them, so that adding up the targets counts each operation once.
- ``ping observer|verdict``: the workers' health check (a Celery ping of this host's worker).

Every metrics endpoint listens on ``PROVELY_METRICS_HOST`` (loopback unless configured). Every
line a service writes on stdout and stderr is one JSON object (``PROVELY_LOG_JSON``): Celery's
start-up banner is turned off.

A worker command keeps its worker running: the Celery worker is a child process, started again
when it exits on its own (``services.cli.keeper``); ``--no-supervise`` runs it in the command's
own process instead, for an outside process manager.

This module holds the group and the ingress; the workers are in ``services.cli.workers``, the
sweeper and the metrics in ``services.cli.loops``, what every serving process sets up in
``services.cli.service_process``.

Shutdown: SIGTERM (or Ctrl-C) is graceful everywhere (a worker's parent passes it on). uvicorn
stops accepting and finishes the requests in flight; a Celery worker performs a warm shutdown —
it finishes the tasks it runs, and since tasks are acknowledged late, anything it could not
finish goes back to the queue; the sweeper ends its current pass.
"""

from __future__ import annotations

import gc
import json
import os
from typing import Any

import typer

from services.cli.loops import metrics, sweeper
from services.cli.service_process import (
    chosen_metrics_port,
    collect_less,
    serve_metrics,
    setup_logging,
    use_multiprocess_metrics,
)
from services.cli.workers import observer, ping, verdict

__all__ = ["ingress_app", "register"]

group = typer.Typer(
    help="Run one Provely service (production: one process per service, scaled apart).",
    no_args_is_help=True,
)


def ingress_app() -> Any:
    """uvicorn factory (``--factory``): logging and Celery hooks set up in each worker process,
    then the ingress app of ``services.ingress.app``.

    Everything loaded by then (the libraries, the app, the contract registry) lives as long as
    the process, so it is moved out of the garbage collector's reach (``gc.freeze``): a full
    collection otherwise walks all of it, and under load that held the event loop for 60 to 100 ms
    at a time (see docs/benchmarks.md, "Ingest")."""
    setup_logging(http=True)
    from shared.runtime.celery_hooks import install_celery_hooks

    install_celery_hooks()
    from services.ingress.app import create_app
    from shared.trust.registry import get_registry

    app = create_app()
    get_registry()  # the contracts and skills every request reads
    gc.collect()
    gc.freeze()
    collect_less()
    return app


MCP_ENV = "PROVELY_MCP_MOUNT"
"""Set by ``serve ingress --mcp`` for its uvicorn workers: JSON ``{api_url, allowed_hosts}``."""


def ingress_app_with_mcp() -> Any:
    """uvicorn factory of ``serve ingress --mcp``: the ingress with the MCP server at ``/mcp``
    (``services.mcp_server.http.mount_mcp``), whose tools call this ingress over loopback."""
    from services.mcp_server.http import mount_mcp

    mount = json.loads(os.environ[MCP_ENV])
    return mount_mcp(ingress_app(), api_url=mount["api_url"], allowed_hosts=mount["allowed_hosts"])


@group.command("ingress")
def ingress(
    host: str = typer.Option("0.0.0.0", "--host", help="Address to listen on."),
    port: int = typer.Option(8080, "--port", min=1, max=65535, help="Port to listen on."),
    workers: int = typer.Option(1, "--workers", min=1, help="uvicorn worker processes."),
    graceful_timeout: int = typer.Option(
        20, "--graceful-timeout", min=1, help="Seconds in-flight requests get on shutdown."
    ),
    metrics_port: int | None = typer.Option(
        None,
        "--metrics-port",
        min=1,
        max=65535,
        help="Prometheus port, apart from the API (default: PROVELY_METRICS_PORT; none: off).",
    ),
    mcp: bool = typer.Option(
        False, "--mcp", help="Also serve the MCP server (provely mcp) at /mcp."
    ),
    mcp_allowed_host: list[str] | None = typer.Option(
        None,
        "--mcp-allowed-host",
        help="With --mcp: an accepted Host header (repeatable); default 127.0.0.1:PORT and "
        "localhost:PORT.",
    ),
) -> None:
    """The HTTP API and the webhook intake (uvicorn); metrics on --metrics-port."""
    from shared.trust.secrets import SecretError, check_secret_key

    try:
        check_secret_key()  # production must set PROVELY_SECRET_KEY: say so before serving
    except SecretError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    served_metrics = chosen_metrics_port(metrics_port, api_port=port)
    if workers > 1:
        use_multiprocess_metrics()
    setup_logging(http=True)
    serve_metrics(served_metrics)
    import uvicorn

    from services.ingress.server import uvicorn_options
    from shared.runtime.settings import get_settings

    factory = "services.cli.serve:ingress_app"
    if mcp:
        hosts = mcp_allowed_host or [f"127.0.0.1:{port}", f"localhost:{port}"]
        os.environ[MCP_ENV] = json.dumps(
            {"api_url": f"http://127.0.0.1:{port}", "allowed_hosts": hosts}
        )
        factory = "services.cli.serve:ingress_app_with_mcp"
    uvicorn.run(
        factory,
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_config=None,
        proxy_headers=True,
        timeout_graceful_shutdown=graceful_timeout,
        # The app writes one structured line per request (services.ingress.access): fields,
        # the request id, and the query's secrets redacted, which uvicorn's own line has not.
        access_log=False,
        **uvicorn_options(get_settings()),  # header/body deadlines, keep-alive, concurrency
    )


group.command("observer")(observer)
group.command("verdict")(verdict)
group.command("ping")(ping)
group.command("sweeper")(sweeper)
group.command("metrics")(metrics)


def register(app: typer.Typer) -> None:
    """Add the ``serve`` group to the root app."""
    app.add_typer(group, name="serve")
