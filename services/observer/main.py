"""Entry point of the observer service: a Celery worker on the ``observe`` queue."""

from __future__ import annotations

import os

from shared.celery_app import OBSERVE_QUEUE, app

__all__ = ["run_worker", "worker_argv"]


def worker_argv(
    queue: str,
    *,
    name: str,
    concurrency: int | None = None,
    pool: str = "prefork",
    loglevel: str = "INFO",
) -> list[str]:
    """The ``celery worker`` arguments of a Provely worker consuming ``queue``."""
    argv = [
        "worker",
        "--queues",
        queue,
        "--hostname",
        f"{name}-{os.getpid()}@%h",
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
    return argv


def run_worker(
    *, concurrency: int | None = 8, pool: str = "threads", loglevel: str = "INFO"
) -> None:
    """Run an observer worker in this process until it is told to stop (SIGTERM, Ctrl-C).

    Threads by default: the tasks wait on PostgreSQL and the provider, not on the CPU, and on
    two cores 8 threads decided 2.6x as many operations per second as 4 prefork processes
    (docs/benchmarks.md, Pipeline). Prefork remains available (``pool="prefork"``).
    """
    app.worker_main(
        worker_argv(
            OBSERVE_QUEUE, name="observer", concurrency=concurrency, pool=pool, loglevel=loglevel
        )
    )
