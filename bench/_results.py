"""A benchmark's result as one line that ``bench/run_all.py`` collects from its output.

Every benchmark prints its own tables for a reader; it also calls :func:`emit` once with its
headline: the figure, the floor it is measured against in the same run (when it has one), the
ratio between them, its target and whether the run met it. The line starts with
:data:`PREFIX` and holds JSON, so the collector needs no knowledge of each script's tables.
"""

from __future__ import annotations

import json

__all__ = ["PREFIX", "emit"]

PREFIX = "BENCH-RESULT "


def emit(
    benchmark: str,
    *,
    figure: str,
    floor: str = "",
    ratio: str = "",
    target: str = "",
    met: bool | None = None,
) -> None:
    """Prints the headline of ``benchmark`` for bench/run_all.py (figures already formatted)."""
    line = {
        "benchmark": benchmark,
        "figure": figure,
        "floor": floor,
        "ratio": ratio,
        "target": target,
        "met": met,
    }
    print(PREFIX + json.dumps(line, ensure_ascii=False), flush=True)
