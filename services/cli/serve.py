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

Shutdown: SIGTERM (or Ctrl-C) is graceful everywhere (a worker's parent passes it on). uvicorn
stops accepting and finishes the requests in flight; a Celery worker performs a warm shutdown —
it finishes the tasks it runs, and since tasks are acknowledged late, anything it could not
finish goes back to the queue; the sweeper ends its current pass.
"""

from __future__ import annotations

import atexit
import contextlib
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


def _setup_logging(*, http: bool = False) -> None:
    from shared.runtime.observability import configure_logging
    from shared.runtime.settings import get_settings

    settings = get_settings()
    configure_logging(level=settings.log_level, json=settings.log_json)
    if http:
        # The ingress writes its own access line per request (services.ingress.access, with
        # fields and the query's secrets redacted); uvicorn's sentence would repeat it.
        access = logging.getLogger("uvicorn.access")
        access.handlers.clear()
        access.propagate = False


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
    _setup_logging(http=True)
    from shared.runtime.observability import install_celery_hooks

    install_celery_hooks()
    from services.ingress.app import create_app
    from shared.trust.registry import get_registry

    app = create_app()
    get_registry()  # the contracts and skills every request reads
    gc.collect()
    gc.freeze()
    collect_less()
    return app


def _metrics_port(option: int | None, api_port: int | None = None) -> int | None:
    from shared.runtime.settings import get_settings

    port = option if option is not None else get_settings().metrics_port
    if port is not None and port == api_port:
        raise _fail(f"the metrics port must not be the API port ({port})")
    return port


def _serve_metrics(port: int | None, extra: Any = ()) -> None:
    """Start this process's metrics endpoint on ``PROVELY_METRICS_HOST:port`` (a thread)."""
    if port is None:
        return
    from shared.runtime.observability import start_metrics_server
    from shared.runtime.settings import get_settings

    host = get_settings().metrics_host
    try:
        start_metrics_server(port, addr=host, extra=extra)
    except OSError as exc:
        # A service's streams carry JSON lines only: said as a log line, not a bare sentence
        # (a kept worker is started again and tries once more).
        from shared.runtime.observability import get_logger

        get_logger("provely.serve").error(
            f"cannot serve metrics on {host}:{port}: {exc.strerror}",
            host=host,
            port=port,
            error=exc.strerror,
        )
        raise typer.Exit(2) from None


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
) -> None:
    """The HTTP API and the webhook intake (uvicorn); metrics on --metrics-port."""
    from shared.trust.secrets import SecretError, check_secret_key

    try:
        check_secret_key()  # production must set PROVELY_SECRET_KEY: say so before serving
    except SecretError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    served_metrics = _metrics_port(metrics_port, api_port=port)
    if workers > 1:
        _use_multiprocess_metrics()
    _setup_logging(http=True)
    _serve_metrics(served_metrics)
    import uvicorn

    from services.ingress.server import uvicorn_options
    from shared.runtime.settings import get_settings

    uvicorn.run(
        "services.cli.serve:ingress_app",
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


def _run_worker(
    queue: str,
    role: str,
    *,
    concurrency: int,
    pool: str,
    metrics_port: int | None,
    max_tasks_per_child: int | None,
    supervise: bool = False,
) -> None:
    if supervise:
        args = ["serve", role, "--concurrency", str(concurrency), "--pool", pool]
        if role == "observer":
            args += ["--queues", queue]
        if metrics_port is not None:
            args += ["--metrics-port", str(metrics_port)]
        if max_tasks_per_child:
            args += ["--max-tasks-per-child", str(max_tasks_per_child)]
        raise typer.Exit(_keep_running(role, [*args, "--no-supervise"]))
    from shared.runtime.settings import get_settings

    settings = get_settings()
    port = _metrics_port(metrics_port)
    if port is not None and pool == "prefork":
        _use_multiprocess_metrics()
    _setup_logging()

    from celery import signals

    from shared.runtime.celery_app import app as celery_app
    from shared.runtime.observability import (
        get_logger,
        install_celery_hooks,
        mark_process_dead,
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

    _say_as_log_lines(json_lines=settings.log_json)
    signals.setup_logging.connect(keep_our_logging, weak=False)
    signals.worker_shutting_down.connect(shutting_down, weak=False)
    signals.worker_shutdown.connect(shut_down, weak=False)
    signals.worker_process_shutdown.connect(child_exited, weak=False)
    install_celery_hooks()
    _serve_metrics(port)
    log.info("worker.starting", role=role, queue=queue, concurrency=concurrency, pool=pool)
    argv = [
        "--quiet",  # no start-up banner on stdout: every line of a service is one JSON object
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


def _say_as_log_lines(*, json_lines: bool) -> None:
    """Celery's worker prints a few sentences itself, outside logging ("worker: Warm shutdown
    (MainProcess)", from its signal handlers, with a raw ``os.write`` on stdout). Write them as
    log lines instead, on stderr, with the same raw write (they are said in signal handlers,
    where taking the logging module's locks is not safe)."""
    import json
    from datetime import UTC, datetime

    import celery.apps.worker as celery_worker

    def say(msg: str, f: Any = None) -> None:
        text = str(msg).strip()
        if json_lines:
            line = json.dumps(
                {
                    "event": text,
                    "level": "info",
                    "logger": "celery.apps.worker",
                    "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
                }
            )
        else:
            line = f"[info] {text}"
        # As Celery's own: losing a sentence must not stop the shutdown.
        with contextlib.suppress(OSError):
            os.write(2, (line + "\n").encode("utf-8", "replace"))

    celery_worker.safe_say = say  # type: ignore[attr-defined]


def _keep_running(role: str, args: list[str]) -> int:
    """Run the worker ``provely ARGS…`` as a child and restart it when it exits on its own
    (see :mod:`services.cli.keeper`); the exit code once it is stopped."""
    _setup_logging()
    from services.cli.keeper import WorkerKeeper
    from services.cli.spawn import provely_argv
    from shared.runtime.observability import get_logger

    keeper = WorkerKeeper(role=role, argv=provely_argv(*args), log=get_logger("provely.serve"))
    keeper.install_signal_handlers()
    return keeper.run()


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
    supervise: bool = typer.Option(
        True,
        "--supervise/--no-supervise",
        help="Run the worker as a child and restart it when it exits on its own (default); "
        "--no-supervise runs it in this process, for an outside process manager.",
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
        supervise=supervise,
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
    supervise: bool = typer.Option(
        True,
        "--supervise/--no-supervise",
        help="Run the worker as a child and restart it when it exits on its own (default); "
        "--no-supervise runs it in this process, for an outside process manager.",
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
        supervise=supervise,
    )


_PING_ROLES = ("observer", "verdict")


@group.command("ping")
def ping(
    role: str = typer.Argument(..., help="observer | verdict"),
    timeout: float = typer.Option(
        5.0, "--timeout", min=0.1, help="Seconds to wait for the worker's answer."
    ),
) -> None:
    """Health check of a worker: exit 0 when a ROLE worker on this host answers a Celery ping
    through the broker (a wedged worker, or one cut off from the broker, does not); 1 when none
    answers in time. Needs a broker with remote control (Redis), not the embedded one."""
    import socket

    if role not in _PING_ROLES:
        raise _fail(f"ping takes {' or '.join(_PING_ROLES)} (got {role!r})")
    from shared.runtime.celery_app import app as celery_app

    if not celery_app.conf.worker_enable_remote_control:
        raise _fail("the embedded broker has no remote control to ping a worker through")
    host = socket.gethostname()
    try:
        replies = celery_app.control.ping(timeout=timeout)
    except Exception as exc:  # the broker itself cannot be reached
        typer.echo(
            f"unhealthy: cannot reach the broker ({exc.__class__.__name__}: {exc})", err=True
        )
        raise typer.Exit(1) from None
    names = [name for reply in replies or () for name in reply]
    mine = [n for n in names if n.startswith(f"{role}.") and n.endswith(f"@{host}")]
    if not mine:
        typer.echo(f"unhealthy: no {role} worker on {host} answered in {timeout:g} s", err=True)
        raise typer.Exit(1)
    typer.echo(" ".join(sorted(mine)))


@group.command("sweeper")
def sweeper(
    metrics_port: int | None = typer.Option(
        None, "--metrics-port", help="Prometheus port (default: PROVELY_METRICS_PORT)."
    ),
) -> None:
    """The loop that re-sends overdue observations and applies deadlines (several may run)."""
    import signal
    import threading

    from shared.runtime.settings import get_settings

    settings = get_settings()
    port = _metrics_port(metrics_port)
    _setup_logging()
    from shared.runtime.observability import get_logger, install_celery_hooks

    install_celery_hooks()
    _serve_metrics(port)
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


@group.command("metrics")
def metrics(
    port: int = typer.Option(
        9200, "--port", min=1, max=65535, help="Prometheus port (on PROVELY_METRICS_HOST)."
    ),
) -> None:
    """The database-wide gauges (operations by state), counted at each scrape: run one."""
    import signal
    import threading

    from shared.runtime.settings import get_settings

    settings = get_settings()
    _setup_logging()
    from shared.db.counts import operations_by_state
    from shared.db.session import get_engine
    from shared.runtime.observability import OperationsByStateCollector, get_logger

    engine = get_engine(settings.resolved_database_url())
    # Only the database's figures: this process's own counters say nothing of the system.
    _serve_metrics(port, extra=[OperationsByStateCollector(operations_by_state(engine))])
    log = get_logger("provely.serve")
    log.info("metrics.starting", host=settings.metrics_host, port=port)
    stop = threading.Event()

    def request_stop(signum: int, _frame: Any) -> None:
        log.info("metrics.stopping", signal=signum)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    stop.wait()


def register(app: typer.Typer) -> None:
    """Add the ``serve`` group to the root app."""
    app.add_typer(group, name="serve")
