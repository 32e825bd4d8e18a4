"""CLI: ``provely serve ingress|observer|verdict|sweeper`` — one production service per process.

- ``ingress``: the HTTP API and webhook intake under uvicorn (``--workers`` processes);
  ``/metrics`` is served by the app itself. Its server limits (request head and body deadlines,
  keep-alive, concurrency) come from the ``PROVELY_INGRESS_*`` settings
  (``services.ingress.server``).
- ``observer`` / ``verdict``: Celery workers consuming only their own queues (``observe`` and
  ``correlate`` / ``verdict``), so each scales on its own; ``observer --queues correlate`` runs
  a worker that only correlates webhook events. ``--metrics-port`` (or
  ``PROVELY_METRICS_PORT``) serves the worker's Prometheus metrics, aggregated over its pool
  processes.
- ``sweeper``: the loop that re-sends overdue observations, applies deadlines and correlates
  webhook events whose message was lost.

Shutdown: SIGTERM (or Ctrl-C) is graceful everywhere. uvicorn stops accepting and finishes the
requests in flight; a Celery worker performs a warm shutdown — it finishes the tasks it runs,
and since tasks are acknowledged late, anything it could not finish goes back to the queue; the
sweeper ends its current pass.
"""

from __future__ import annotations

import atexit
import gc
import logging
import os
import shutil
import tempfile
from typing import Any

import typer

__all__ = ["ingress_app", "register"]

group = typer.Typer(
    help="Run one Provely service (production: one process per service, scaled apart).",
    no_args_is_help=True,
)

_MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
_OWN_METRICS_DIR: list[str] = []


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def _use_multiprocess_metrics() -> None:
    """Let forked/spawned children write metrics to a fresh directory the parent aggregates.

    Must run before ``prometheus_client`` is first imported in this process. An operator's own
    ``PROMETHEUS_MULTIPROC_DIR`` is respected (and must be emptied by them between runs).
    """
    if os.environ.get(_MULTIPROC_ENV):
        return
    directory = tempfile.mkdtemp(prefix="provely-metrics-")
    os.environ[_MULTIPROC_ENV] = directory
    _OWN_METRICS_DIR.append(directory)
    atexit.register(shutil.rmtree, directory, True)


def _setup_logging() -> None:
    from shared.observability import configure_logging
    from shared.settings import get_settings

    settings = get_settings()
    configure_logging(level=settings.log_level, json=settings.log_json)


YOUNG_GC_THRESHOLD = 20_000
"""Container allocations (less deallocations) between two collections of the youngest
generation, in the serving processes (Python's default: 700); the older generations keep
theirs, counted in young collections. The intake and the correlator allocate and drop rows,
events and messages by the thousand a second and keep almost none: with the default, the
correlator spent 9-13 µs of CPU per event collecting, about one tenth of its work, and with
this threshold under 1 µs (docs/benchmarks.md, "Ingest"). At most this many young objects in
reference cycles wait for their collection: a few megabytes."""


def collect_less() -> None:
    """Collect the youngest generation every :data:`YOUNG_GC_THRESHOLD` allocations."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_GC_THRESHOLD, middle, old)


def ingress_app() -> Any:
    """uvicorn factory (``--factory``): logging and Celery hooks set up in each worker process,
    then the ingress app of ``services.ingress.app``.

    Everything loaded by then (the libraries, the app, the contract registry) lives as long as
    the process, so it is moved out of the garbage collector's reach (``gc.freeze``): a full
    collection otherwise walks all of it, and under load that held the event loop for 60 to 100 ms
    at a time (see docs/benchmarks.md, "Ingest")."""
    _setup_logging()
    from shared.observability import install_celery_hooks

    install_celery_hooks()
    from services.ingress.app import create_app
    from shared.registry import get_registry

    app = create_app()
    get_registry()  # the contracts and skills every request reads
    gc.collect()
    gc.freeze()
    collect_less()
    return app


@group.command("ingress")
def ingress(
    host: str = typer.Option("0.0.0.0", "--host", help="Address to listen on."),
    port: int = typer.Option(8080, "--port", min=1, max=65535, help="Port to listen on."),
    workers: int = typer.Option(1, "--workers", min=1, help="uvicorn worker processes."),
    graceful_timeout: int = typer.Option(
        20, "--graceful-timeout", min=1, help="Seconds in-flight requests get on shutdown."
    ),
) -> None:
    """The HTTP API and the webhook intake (uvicorn); metrics at /metrics."""
    from shared.secrets import SecretError, check_secret_key

    try:
        check_secret_key()  # production must set PROVELY_SECRET_KEY: say so before serving
    except SecretError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if workers > 1:
        _use_multiprocess_metrics()
    _setup_logging()
    import uvicorn

    from services.ingress.server import uvicorn_options
    from shared.settings import get_settings

    uvicorn.run(
        "services.cli.serve:ingress_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_config=None,
        proxy_headers=True,
        timeout_graceful_shutdown=graceful_timeout,
        access_log=True,  # one JSON line per request, with its request id
        **uvicorn_options(get_settings()),  # header/body deadlines, keep-alive, concurrency
    )


def _run_worker(
    queue: str,
    role: str,
    *,
    concurrency: int,
    pool: str,
    metrics_port: int | None,
    max_tasks_per_child: int | None,
) -> None:
    from shared.settings import get_settings

    settings = get_settings()
    port = metrics_port if metrics_port is not None else settings.metrics_port
    if port is not None and pool == "prefork":
        _use_multiprocess_metrics()
    _setup_logging()

    from celery import signals

    from shared.celery_app import app as celery_app
    from shared.observability import (
        get_logger,
        install_celery_hooks,
        mark_process_dead,
        start_metrics_server,
    )

    def keep_our_logging(**_: Any) -> None:
        """Connected so that Celery leaves the logging configured above alone."""

    def child_exited(pid: int | None = None, **_: Any) -> None:
        if pid is not None:
            mark_process_dead(pid)

    log = get_logger("provely.serve")

    def shutting_down(sig: Any = None, how: Any = None, **_: Any) -> None:
        log.info("worker.stopping", role=role, signal=str(sig), how=str(how))

    def shut_down(sender: Any = None, **_: Any) -> None:
        """The warm shutdown is complete: tasks finished, acks flushed, unacknowledged messages
        handed back to the broker. Exit now; the interpreter's own teardown of a worker takes
        seconds and holds nothing that still matters."""
        code = getattr(sender, "exitcode", 0) or 0
        log.info("worker.stopped", role=role, exit_code=code)
        logging.shutdown()
        directory = os.environ.get(_MULTIPROC_ENV)
        if directory and directory.startswith(tempfile.gettempdir()) and _OWN_METRICS_DIR:
            shutil.rmtree(directory, ignore_errors=True)
        os._exit(int(code))

    signals.setup_logging.connect(keep_our_logging, weak=False)
    signals.worker_shutting_down.connect(shutting_down, weak=False)
    signals.worker_shutdown.connect(shut_down, weak=False)
    signals.worker_process_shutdown.connect(child_exited, weak=False)
    install_celery_hooks()
    if port is not None:
        start_metrics_server(port)
    log.info("worker.starting", role=role, queue=queue, concurrency=concurrency, pool=pool)
    argv = [
        "worker",
        "--queues",
        queue,
        "--concurrency",
        str(concurrency),
        "--pool",
        pool,
        "--hostname",
        f"{role}.{os.getpid()}@%h",
        "--loglevel",
        settings.log_level.upper(),
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]
    if max_tasks_per_child:
        argv += ["--max-tasks-per-child", str(max_tasks_per_child)]
    collect_less()  # pool processes are forked from this one and keep its thresholds
    celery_app.worker_main(argv)


_POOLS = ("prefork", "threads", "solo")


def _check_pool(pool: str) -> str:
    if pool not in _POOLS:
        raise _fail(f"--pool must be one of {', '.join(_POOLS)} (got {pool!r})")
    return pool


_OBSERVER_QUEUES = ("observe", "correlate")


def _observer_queues(value: str) -> str:
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = sorted(set(names) - set(_OBSERVER_QUEUES))
    if not names or unknown:
        raise _fail(
            f"--queues takes {' and/or '.join(_OBSERVER_QUEUES)}, comma-separated (got {value!r})"
        )
    return ",".join(dict.fromkeys(names))


@group.command("observer")
def observer(
    concurrency: int = typer.Option(2, "--concurrency", min=1, help="Tasks run at once."),
    queues: str = typer.Option(
        "observe,correlate",
        "--queues",
        help="observe (readbacks) and/or correlate (webhook events), comma-separated.",
    ),
    pool: str = typer.Option("prefork", "--pool", help="prefork | threads | solo."),
    metrics_port: int | None = typer.Option(
        None, "--metrics-port", help="Prometheus port (default: PROVELY_METRICS_PORT)."
    ),
    max_tasks_per_child: int | None = typer.Option(
        None, "--max-tasks-per-child", min=1, help="Recycle a pool process after N tasks."
    ),
) -> None:
    """Celery worker for the ``observe`` and ``correlate`` queues: reads the provider's
    channels, and links stored webhook events with their operations."""
    _run_worker(
        _observer_queues(queues),
        "observer",
        concurrency=concurrency,
        pool=_check_pool(pool),
        metrics_port=metrics_port,
        max_tasks_per_child=max_tasks_per_child,
    )


@group.command("verdict")
def verdict(
    concurrency: int = typer.Option(2, "--concurrency", min=1, help="Tasks run at once."),
    pool: str = typer.Option("prefork", "--pool", help="prefork | threads | solo."),
    metrics_port: int | None = typer.Option(
        None, "--metrics-port", help="Prometheus port (default: PROVELY_METRICS_PORT)."
    ),
    max_tasks_per_child: int | None = typer.Option(
        None, "--max-tasks-per-child", min=1, help="Recycle a pool process after N tasks."
    ),
) -> None:
    """Celery worker for the ``verdict`` queue: decides, writes states and receipts."""
    _run_worker(
        "verdict",
        "verdict",
        concurrency=concurrency,
        pool=_check_pool(pool),
        metrics_port=metrics_port,
        max_tasks_per_child=max_tasks_per_child,
    )


@group.command("sweeper")
def sweeper(
    metrics_port: int | None = typer.Option(
        None, "--metrics-port", help="Prometheus port (default: PROVELY_METRICS_PORT)."
    ),
) -> None:
    """The loop that re-sends overdue observations and applies deadlines (several may run)."""
    import signal
    import threading

    from shared.settings import get_settings

    settings = get_settings()
    _setup_logging()
    from shared.observability import get_logger, install_celery_hooks, start_metrics_server

    install_celery_hooks()
    port = metrics_port if metrics_port is not None else settings.metrics_port
    if port is not None:
        start_metrics_server(port)
    stop = threading.Event()

    def request_stop(signum: int, _frame: Any) -> None:
        get_logger("provely.serve").info("sweeper.stopping", signal=signum)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    from services.verdict.sweeper import run_forever

    get_logger("provely.serve").info(
        "sweeper.starting", interval_s=settings.sweeper_interval_seconds
    )
    run_forever(stop=stop)


def register(app: typer.Typer) -> None:
    """Add the ``serve`` group to the root app."""
    app.add_typer(group, name="serve")
