"""The published contract page under 50 concurrent readers, beside its floor.

Run: ``.venv/bin/python bench/pages.py [--readers 50] [--duration 10] [--warmup 2]``

A real ingress (uvicorn, one worker, its own process, on loopback; SQLite and the embedded
broker, which the pages never touch) serves ``/verify/stripe/stripe.refund.succeeded`` as HTML
to ``--readers`` concurrent readers (asyncio and httpx, one connection each, each request
after the previous answer), then serves the pages' stylesheet (``/verify/static/pages.css``, a
static file served by the same server) to the same readers. The second run is the floor: what
this server, client and machine cost for a request that renders nothing. Printed: requests
per second, p50 and p99 of each, and the ratio of the two p99s. The client shares the
machine with the server: the figures are for comparing, not for capacity planning.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from cryptography.fernet import Fernet

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.servers import free_port  # noqa: E402

PAGE = "/verify/stripe/stripe.refund.succeeded"
FLOOR = "/verify/static/pages.css"


async def _reader(client: httpx.AsyncClient, path: str, until: float, out: list[float]) -> None:
    while time.perf_counter() < until:
        started = time.perf_counter()
        answer = await client.get(path)
        if answer.status_code != 200:
            raise RuntimeError(f"{path} answered {answer.status_code}")
        out.append(time.perf_counter() - started)


async def load(
    base_url: str, path: str, readers: int, warmup: float, duration: float
) -> tuple[list[float], float]:
    """(latencies of the measured window, its length in seconds)."""
    limits = httpx.Limits(max_connections=readers, max_keepalive_connections=readers)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=60) as client:
        ignored: list[float] = []
        until = time.perf_counter() + warmup
        await asyncio.gather(*(_reader(client, path, until, ignored) for _ in range(readers)))
        latencies: list[float] = []
        started = time.perf_counter()
        until = started + duration
        await asyncio.gather(*(_reader(client, path, until, latencies) for _ in range(readers)))
        return latencies, time.perf_counter() - started


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[int(q * 1000) - 1]


def _serve(tmp: Path) -> tuple[subprocess.Popen[bytes], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")} | {
        "PROVELY_DATABASE_URL": f"sqlite:///{tmp / 'provely.db'}",
        "PROVELY_SECRET_KEY": Fernet.generate_key().decode(),
        "PROVELY_DATA_DIR": str(tmp),
        "PROVELY_BROKER_URL": f"sqla+sqlite:///{tmp / 'broker.db'}",
        "PROVELY_LOG_LEVEL": "WARNING",
    }
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "services.ingress.app:create_app",
         "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
         "--no-access-log"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,  # uvicorn alone leaves the access log unconfigured
    )  # fmt: skip
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("uvicorn exited before it was ready")
        try:
            if httpx.get(base_url + PAGE, timeout=2).status_code == 200:
                return process, base_url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("uvicorn did not become ready")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readers", type=int, default=50)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    args = parser.parse_args()
    process, base_url = _serve(Path(tempfile.mkdtemp(prefix="provely-bench-pages-")))
    results = {}
    try:
        for name, path in (("contract page", PAGE), ("static floor", FLOOR)):
            latencies, elapsed = asyncio.run(
                load(base_url, path, args.readers, args.warmup, args.duration)
            )
            results[name] = (
                len(latencies) / elapsed,
                percentile(latencies, 0.5),
                percentile(latencies, 0.99),
            )
    finally:
        process.terminate()
        process.wait(timeout=30)
    print(f"python {platform.python_version()}, {os.cpu_count()} cores, {args.readers} readers, "
          f"{args.duration:.0f} s each")  # fmt: skip
    for name, (rps, p50, p99) in results.items():
        print(f"{name:14} {rps:8.0f} req/s   p50 {p50 * 1000:7.1f} ms   p99 {p99 * 1000:7.1f} ms")
    ratio = results["contract page"][2] / results["static floor"][2]
    print(f"p99 ratio (page / floor): {ratio:.2f}")


if __name__ == "__main__":
    main()
