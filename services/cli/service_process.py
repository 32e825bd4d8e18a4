"""What every ``provely serve`` process sets up before it serves: its logging, the garbage
collector's thresholds, and its Prometheus metrics endpoint (aggregated over child processes
when it has some).

Every metrics endpoint listens on ``PROVELY_METRICS_HOST`` (loopback unless configured).
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

__all__ = [
    "MULTIPROC_ENV",
    "OWN_METRICS_DIR",
    "YOUNG_GC_THRESHOLD",
    "chosen_metrics_port",
    "collect_less",
    "serve_metrics",
    "setup_logging",
    "use_multiprocess_metrics",
]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
OWN_METRICS_DIR: list[str] = []


def _fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def use_multiprocess_metrics() -> None:
    """Let forked/spawned children write metrics to a fresh directory the parent aggregates.

    Must run before ``prometheus_client`` is first imported in this process. An operator's own
    ``PROMETHEUS_MULTIPROC_DIR`` is respected (and must be emptied by them between runs).
    """
    if os.environ.get(MULTIPROC_ENV):
        return
    directory = tempfile.mkdtemp(prefix="provely-metrics-")
    os.environ[MULTIPROC_ENV] = directory
    OWN_METRICS_DIR.append(directory)
    atexit.register(shutil.rmtree, directory, True)


def setup_logging(*, http: bool = False) -> None:
    from shared.runtime.logs import configure_logging
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


def chosen_metrics_port(option: int | None, api_port: int | None = None) -> int | None:
    from shared.runtime.settings import get_settings

    port = option if option is not None else get_settings().metrics_port
    if port is not None and port == api_port:
        raise _fail(f"the metrics port must not be the API port ({port})")
    return port


def serve_metrics(port: int | None, extra: Any = ()) -> None:
    """Start this process's metrics endpoint on ``PROVELY_METRICS_HOST:port`` (a thread)."""
    if port is None:
        return
    from shared.runtime.metrics import start_metrics_server
    from shared.runtime.settings import get_settings

    host = get_settings().metrics_host
    try:
        start_metrics_server(port, addr=host, extra=extra)
    except OSError as exc:
        # A service's streams carry JSON lines only: said as a log line, not a bare sentence
        # (a kept worker is started again and tries once more).
        from shared.runtime.logs import get_logger

        get_logger("provely.serve").error(
            f"cannot serve metrics on {host}:{port}: {exc.strerror}",
            host=host,
            port=port,
            error=exc.strerror,
        )
        raise typer.Exit(2) from None
