"""Entry points of the verdict service: the ``verdict`` queue worker and the sweeper."""

from __future__ import annotations

import contextlib
import os

from services.verdict.sweeper import run_forever
from shared.celery_app import VERDICT_QUEUE, app

__all__ = ["run_sweeper", "run_worker"]


def run_worker(
    *, concurrency: int | None = 8, pool: str = "threads", loglevel: str = "INFO"
) -> None:
    """Run a verdict worker in this process until it is told to stop (SIGTERM, Ctrl-C).

    Threads by default: the tasks wait on PostgreSQL and the provider, not on the CPU, and on
    two cores 8 threads decided 2.6x as many operations per second as 4 prefork processes
    (docs/benchmarks.md, Pipeline). Prefork remains available (``pool="prefork"``).
    """
    argv = [
        "worker",
        "--queues",
        VERDICT_QUEUE,
        "--hostname",
        f"verdict-{os.getpid()}@%h",
        "--pool",
        pool,
        "--loglevel",
        loglevel,
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]
    if concurrency is not None:
        argv += ["--concurrency", str(concurrency)]
    app.worker_main(argv)


def run_sweeper(*, interval_s: float | None = None) -> None:
    """Run the sweeper in this process until interrupted (several may run at once)."""
    with contextlib.suppress(KeyboardInterrupt):
        run_forever(interval_s=interval_s)
