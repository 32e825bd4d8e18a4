"""The serving processes collect their youngest generation less often
(``services.cli.service_process.YOUNG_GC_THRESHOLD``): the workers are set before Celery starts
(its pool processes are forked with the same thresholds), the ingress in its app factory."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

from services.cli import serve, service_process, workers


@pytest.fixture(autouse=True)
def thresholds_restored() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*before)


def test_collect_less_moves_only_the_youngest_generation() -> None:
    service_process.collect_less()
    assert gc.get_threshold() == (service_process.YOUNG_GC_THRESHOLD, 10, 10)
    assert service_process.YOUNG_GC_THRESHOLD > 700


@pytest.fixture
def celery_signals_restored() -> Iterator[None]:
    """``_run_worker`` connects its handlers (one exits the process when a worker shuts down):
    none stays connected in this test process, and what it replaced in Celery (the sentences
    its worker prints) and in the Celery hooks (shared.runtime.celery_hooks) is put back."""
    import celery.apps.worker as celery_worker
    from celery import signals
    from celery.utils.dispatch import Signal

    from shared.runtime import celery_hooks

    kept = {
        name: list(signal.receivers)
        for name, signal in vars(signals).items()
        if isinstance(signal, Signal)
    }
    say = celery_worker.safe_say
    installed = celery_hooks._CELERY_HOOKS_INSTALLED
    yield
    for name, receivers in kept.items():
        signal = getattr(signals, name)
        signal.receivers[:] = receivers
        signal.sender_receivers_cache.clear()
    celery_worker.safe_say = say
    celery_hooks._CELERY_HOOKS_INSTALLED = installed


@pytest.mark.usefixtures("celery_signals_restored")
def test_a_worker_starts_celery_with_the_thresholds_set(monkeypatch: pytest.MonkeyPatch) -> None:
    from shared.runtime.celery_app import app as celery_app

    seen: list[tuple[int, int, int]] = []

    def worker_main(argv: list[str]) -> None:
        seen.append(gc.get_threshold())

    monkeypatch.setattr(celery_app, "worker_main", worker_main)
    monkeypatch.setattr(workers, "setup_logging", lambda **_: None)
    workers._run_worker(
        "correlate", "observer", concurrency=1, pool="solo", metrics_port=None,
        max_tasks_per_child=None,
    )  # fmt: skip
    assert seen == [(service_process.YOUNG_GC_THRESHOLD, 10, 10)]


@pytest.mark.usefixtures("celery_signals_restored")
def test_the_ingress_factory_sets_them(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serve, "setup_logging", lambda **_: None)
    monkeypatch.setattr(gc, "freeze", lambda: None)  # not this test process's whole heap
    app: Any = serve.ingress_app()
    assert app is not None
    assert gc.get_threshold() == (service_process.YOUNG_GC_THRESHOLD, 10, 10)
