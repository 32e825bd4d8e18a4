"""CLI: ``provely serve sweeper|metrics`` — the two services that are a loop, not a worker.

- ``sweeper``: the loop that re-sends overdue observations, applies deadlines and correlates
  webhook events whose message was lost; it ends its current pass on SIGTERM.
- ``metrics``: the database-wide gauges (operations by state), counted in the database at each
  scrape.
"""

from __future__ import annotations

from typing import Any

import typer

from services.cli.service_process import chosen_metrics_port, serve_metrics, setup_logging

__all__ = ["metrics", "sweeper"]


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
    port = chosen_metrics_port(metrics_port)
    setup_logging()
    from shared.runtime.celery_hooks import install_celery_hooks
    from shared.runtime.logs import get_logger

    install_celery_hooks()
    serve_metrics(port)
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
    setup_logging()
    from shared.db.counts import operations_by_state
    from shared.db.session import get_engine
    from shared.runtime.logs import get_logger
    from shared.runtime.metrics import OperationsByStateCollector

    engine = get_engine(settings.resolved_database_url())
    # The database's figures; under PROMETHEUS_MULTIPROC_DIR (the embedded system sets one
    # for all its services) also every service's counters, aggregated. This process's own
    # counters say nothing of the system.
    serve_metrics(port, extra=[OperationsByStateCollector(operations_by_state(engine))])
    log = get_logger("provely.serve")
    log.info("metrics.starting", host=settings.metrics_host, port=port)
    stop = threading.Event()

    def request_stop(signum: int, _frame: Any) -> None:
        log.info("metrics.stopping", signal=signum)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    stop.wait()
