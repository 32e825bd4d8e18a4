"""Wall time of ``provely demo`` and ``provely demo --all`` on this machine (the 3-minute promise).

Run: ``.venv/bin/python bench/demo.py [--runs 3] [--write]``

Each run is a fresh ``provely demo --json`` process, exactly as a user starts it: the embedded
system boots (migrations, four services), the sandbox starts, the scenarios play, everything
stops. The figure is the wall time of the whole command; the per-scenario times come from the
demo's own report. ``--write`` adds a row to the table of the "## Demo" section of
``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.doc_rows import add_row  # noqa: E402

PROVELY = ROOT / ".venv" / "bin" / "provely"
SECTION = "## Demo"
HEADER = (
    "| measured (UTC) | python | machine | runs | demo s | demo --all s | target |\n"
    "|---|---|---|---|---|---|---|"
)
TARGET_S = 180.0


def run_once(*args: str) -> tuple[float, dict[str, Any]]:
    started = time.monotonic()
    done = subprocess.run(
        [str(PROVELY), "demo", "--json", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    wall = time.monotonic() - started
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-3000:])
        raise SystemExit(f"provely demo {' '.join(args)} failed (exit {done.returncode})")
    return wall, json.loads(done.stdout)


def write_row(row: str) -> None:
    add_row(SECTION, HEADER, row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    single, every, slowest = [], [], []
    for n in range(args.runs):
        wall, _ = run_once()
        single.append(wall)
        wall_all, report = run_once("--all")
        every.append(wall_all)
        slowest.append(max(o["elapsed_s"] for o in report["outcomes"]))
        print(f"run {n + 1}: demo {wall:.1f} s, demo --all {wall_all:.1f} s", flush=True)
    load = os.getloadavg()[0]
    row = (
        f"| {datetime.now(UTC):%Y-%m-%d %H:%M} | {platform.python_version()} | "
        f"{platform.machine()}, {os.cpu_count()} CPUs, load {load:.1f} | {args.runs} | "
        f"{median(single):.1f} | {median(every):.1f} (slowest scenario {median(slowest):.1f}) | "
        f"< {TARGET_S:.0f} |"
    )
    print(row)
    if args.write:
        write_row(row)


if __name__ == "__main__":
    main()
