"""Warm a worker so its first task is not slower than the others.

A task on a cold process pays for lazy imports (metrics, secrets, receipts), the contract
registry and the first database connection; on a short schedule that shows as a late reading.
:func:`preload` runs in the worker's main process before it forks its pool, so every child
inherits the work; :func:`warm_up` runs in each child (its own database connection).
"""

from __future__ import annotations

import importlib
import logging

from sqlalchemy import text

__all__ = ["preload", "warm_up"]

log = logging.getLogger(__name__)

_MODULES = (
    "shared.runtime.metrics",
    "shared.trust.secrets",
    "shared.lifecycle.receipts",
    "shared.lifecycle.operations",
    "shared.trust.registry",
    "shared.core.engine",
    "shared.core.events",
    "shared.core.retry",
)


def preload() -> None:
    """Import what tasks import lazily and load the contract registry; never raises."""
    try:
        for name in _MODULES:
            importlib.import_module(name)
        from shared.lifecycle.contracts import shipped_contracts

        shipped_contracts()
    except Exception:
        log.warning("worker preload failed; the first task will do it", exc_info=True)


def warm_up() -> None:
    """Open this process's database connection; never raises."""
    try:
        from shared.db.session import get_engine

        with get_engine().connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception:
        log.warning("worker warm-up failed; the first task will connect", exc_info=True)
