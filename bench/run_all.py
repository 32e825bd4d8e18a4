"""Runs every benchmark with short settings and prints one table: figure, floor, ratio, target.

Each benchmark runs as its own process, one after another (they would measure each other
otherwise), with the arguments below — shorter than their defaults, so that the whole set fits
in about 20 minutes on a 2-CPU machine — and a time limit. Each prints its own tables (kept in
``--logs``, a temporary directory by default) and one ``BENCH-RESULT`` line
(``bench/_results.py``) that this script collects. A benchmark that fails, times out or prints
no result is a row that says so; the exit status is 1 when any row did not meet its target or
did not finish.

    .venv/bin/python bench/run_all.py [--only api wake …] [--skip ingest …] [--logs DIR]

Needs what the benchmarks need: PostgreSQL and Redis on loopback (as the test suite), and
``wrk`` for the ingest benchmark (``apt-get install -y wrk``; without it that row says so).
For the figures of record run each benchmark with its defaults on a quiet machine
(docs/benchmarks.md); this table is for seeing everything side by side in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._results import PREFIX  # noqa: E402


@dataclass(frozen=True)
class Bench:
    name: str
    argv: tuple[str, ...]
    limit_s: int
    needs: str = ""  # a command that must be on the PATH


BENCHES = (
    Bench("engine", ("bench/engine.py", "--seconds", "1", "--rounds", "3"), 120),
    Bench("api", ("bench/api.py", "--duration", "10", "--warmup", "2", "--statements"), 240),
    Bench("pipeline", ("bench/pipeline.py", "--ops", "500", "--open", "2000"), 420),
    Bench(
        "ingest",
        (
            "bench/ingest.py",
            "--duration",
            "8",
            "--connections",
            "64",
            "256",
            "--latency-seconds",
            "8",
        ),
        420,
        needs="wrk",
    ),
    Bench("wake", ("bench/wake.py", "--ops", "40"), 300),
    Bench("supersede", ("bench/supersede.py", "--ops", "40"), 300),
    Bench("embedded", ("bench/embedded.py", "--operations", "25", "--shape", "both"), 420),
    Bench("worlds", ("bench/worlds.py", "--worlds", "100", "--concurrency", "12"), 480),
)


def run(bench: Bench, logs: Path) -> tuple[list[dict[str, object]], str, float]:
    """Runs one benchmark; its results, a status word and its wall time."""
    if bench.needs and shutil.which(bench.needs) is None:
        return [], f"not run: needs {bench.needs}", 0.0
    log = logs / f"{bench.name}.log"
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as out:
        try:
            process = subprocess.run(
                [sys.executable, *bench.argv],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=bench.limit_s,
                check=False,
            )
            status = "ok" if process.returncode == 0 else f"exit {process.returncode}"
        except subprocess.TimeoutExpired:
            status = f"timed out after {bench.limit_s} s"
    elapsed = time.monotonic() - started
    results = [
        json.loads(line[len(PREFIX) :])
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines()
        if line.startswith(PREFIX)
    ]
    return results, status, elapsed


def main() -> int:
    names = [bench.name for bench in BENCHES]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=names, default=None)
    parser.add_argument("--skip", nargs="+", choices=names, default=[])
    parser.add_argument("--logs", type=Path, default=None, help="keep each benchmark's output")
    args = parser.parse_args()
    chosen = [b for b in BENCHES if (args.only is None or b.name in args.only)]
    chosen = [b for b in chosen if b.name not in args.skip]
    logs = args.logs or Path(tempfile.mkdtemp(prefix="provely-bench-all-"))
    logs.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()[0]
    print(f"{len(chosen)} benchmarks; each one's output in {logs}", file=sys.stderr)
    rows: list[str] = []
    all_met = True
    total = 0.0
    for bench in chosen:
        print(f"running {bench.name} (limit {bench.limit_s} s) …", file=sys.stderr, flush=True)
        results, status, elapsed = run(bench, logs)
        total += elapsed
        if not results:
            all_met = False
            rows.append(f"| {bench.name} | {status}: no result | | | | no | {elapsed:.0f} |")
            continue
        for r in results:
            met = {True: "yes", False: "no", None: "—"}[r["met"]]  # type: ignore[index]
            all_met = all_met and r["met"] is not False and status == "ok"
            note = "" if status == "ok" else f" ({status})"
            rows.append(
                f"| {r['benchmark']} | {r['figure']}{note} | {r['floor'] or '—'} "
                f"| {r['ratio'] or '—'} | {r['target'] or '—'} | {met} | {elapsed:.0f} |"
            )
    print(
        f"\n{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, load {load_before:.1f} before and "
        f"{os.getloadavg()[0]:.1f} after, {total / 60:.1f} min\n"
    )
    print("| benchmark | figure | floor (same run) | ratio | target | met | s |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        print(row)
    return 0 if all_met else 1


if __name__ == "__main__":
    raise SystemExit(main())
