"""Database-wide figures for the metrics gauges (``provely serve metrics``).

The collectors live in ``shared.runtime.metrics``, which knows nothing of the record:
each is handed a function from here that reads its figure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import func, select

from shared.db.models import Operation

__all__ = ["operations_by_state"]


def operations_by_state(engine: Any) -> Callable[[], dict[str, int]]:
    """A ``count_by_state`` for :class:`shared.runtime.metrics.OperationsByStateCollector`
    reading ``engine``."""

    def count() -> dict[str, int]:
        with engine.connect() as conn:
            rows = conn.execute(
                select(Operation.state, func.count()).group_by(Operation.state)
            ).all()
        return {str(state): int(n) for state, n in rows}

    return count
