"""CLI: ``provely serve observer|verdict`` — the Celery workers — and ``provely serve ping``,
their health check.

Each worker consumes only its own queues (``observe`` and ``correlate`` / ``verdict``), so each
scales on its own. A worker command keeps its worker running: the Celery worker is a child
process, started again when it exits on its own (``services.cli.keeper``); ``--no-supervise``
runs it in the command's own process instead, for an outside process manager. Celery's start-up
banner is turned off and the sentences its worker prints are written as log lines.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from typing import Any

import typer

from services.cli.service_process import (
    MULTIPROC_ENV,
    OWN_METRICS_DIR,
    chosen_metrics_port,
    collect_less,
    serve_metrics,
    setup_logging,
    use_multiprocess_metrics,
)

__all__ = ["observer", "ping", "verdict"]


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def _run_worker(  # noqa: C901  # pay down: options and start-up in one; split them
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
    port = chosen_metrics_port(metrics_port)
    if port is not None and pool == "prefork":
        use_multiprocess_metrics()
    setup_logging()

    from celery import signals

    from shared.runtime.celery_app import app as celery_app
    from shared.runtime.celery_hooks import install_celery_hooks
    from shared.runtime.logs import get_logger
    from shared.runtime.metrics import mark_process_dead

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
        directory = os.environ.get(MULTIPROC_ENV)
        if directory and directory.startswith(tempfile.gettempdir()) and OWN_METRICS_DIR:
            shutil.rmtree(directory, ignore_errors=True)
        os._exit(int(code))

    _say_as_log_lines(json_lines=settings.log_json)
    signals.setup_logging.connect(keep_our_logging, weak=False)
    signals.worker_shutting_down.connect(shutting_down, weak=False)
    signals.worker_shutdown.connect(shut_down, weak=False)
    signals.worker_process_shutdown.connect(child_exited, weak=False)
    install_celery_hooks()
    serve_metrics(port)
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
    setup_logging()
    from services.cli.keeper import WorkerKeeper
    from services.cli.spawn import provely_argv
    from shared.runtime.logs import get_logger

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
