"""Benchmark: hostile input against a real ingress — linear-time patterns and bounded pages.

1. **Patterns.** Python's ``re`` against ``^(a+)+$`` on ``n`` a's and a ``!`` (the time doubles
   with each character; measured up to ``--re-max`` characters), and RE2 on 1,000 characters.
2. **Requests.** ``provely serve ingress`` on the embedded default (SQLite, a temporary data
   dir) in its own process; a workspace uploads a contract whose input ``charge`` has the
   pattern ``^(a+)+$`` and creates ``--requests`` operations with a 1,000-character hostile
   ``charge`` (each answered 422), one after the other, while another client polls ``/healthz``
   every 10 ms: latencies of both.
3. **List pages.** ``--operations`` operations with ``input`` and ``metadata`` near the cap
   (``PROVELY_OPERATION_FIELD_MAX_BYTES``), then ``--clients`` concurrent clients each reading
   ``GET /v1/operations?limit=200`` ``--rounds`` times: the ingress's RSS before, at its peak
   (sampled every 20 ms) and after, and the size of a page.

    .venv/bin/python bench/hostile.py [--requests 200] [--clients 8] [--rounds 5] [--write]

Prints Markdown rows; ``--write`` appends them to ``docs/benchmarks.md`` under
"## Hostile input".
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.cli.spawn import free_port, provely_argv  # noqa: E402
from shared.core.patterns import pattern_matches  # noqa: E402
from shared.db.migrate import upgrade  # noqa: E402
from shared.db.session import make_engine, session_scope  # noqa: E402
from shared.db.tenants import create_workspace  # noqa: E402
from shared.runtime.settings import Settings  # noqa: E402

SECTION = "## Hostile input"
HOSTILE = r"^(a+)+$"
EXAMPLE = ROOT / "contracts" / "examples" / "app.entitlement.revoked.yaml"
REFUND_INPUT = {"charge": "ch_bench", "amount": 500, "currency": "usd"}


def machine() -> str:
    load = os.getloadavg()[0]
    return f"{platform.machine()}, {os.cpu_count()} CPUs, load {load:.1f}"


def pattern_figures(re_max: int) -> tuple[list[tuple[int, float]], float]:
    backtracking = re.compile(HOSTILE)
    timings = []
    for n in range(16, re_max + 1, 2):
        started = time.perf_counter()
        backtracking.search("a" * n + "!")
        timings.append((n, time.perf_counter() - started))
    value = "a" * 1000 + "!"
    pattern_matches(HOSTILE, value)
    rounds = 1000
    started = time.perf_counter()
    for _ in range(rounds):
        pattern_matches(HOSTILE, value)
    return timings, (time.perf_counter() - started) / rounds


def hostile_contract() -> str:
    text = EXAMPLE.read_text("utf-8")
    text = text.replace("id: app.entitlement.revoked", "id: bench.hostile.pattern", 1)
    text = text.replace("certification: example", "certification: custom", 1)
    return text.replace('pattern: "^ch_[A-Za-z0-9_]+$"', f'pattern: "{HOSTILE}"', 1)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def serve(tmp: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    settings = Settings(data_dir=tmp / "data")
    url = settings.resolved_database_url()
    upgrade(url)
    engine = make_engine(url)
    with session_scope(engine) as session:
        _, admin_key = create_workspace(session, "bench", now=datetime.now(UTC))
    engine.dispose()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")} | {
        "PROVELY_DATA_DIR": str(tmp / "data"),
        "PROVELY_LOG_LEVEL": "WARNING",
    }
    log = (tmp / "ingress.log").open("wb")
    process = subprocess.Popen(
        provely_argv("serve", "ingress", "--host", "127.0.0.1", "--port", str(port)),
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise RuntimeError("the ingress exited:\n" + (tmp / "ingress.log").read_text())
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("the ingress did not start")
        time.sleep(0.2)
    return process, base, admin_key


def ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def request_figures(base: str, key: str, requests: int) -> dict[str, float]:
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
        uploaded = client.post(
            "/v1/contracts",
            content=hostile_contract(),
            headers={"Content-Type": "application/yaml"},
        )
        if uploaded.status_code not in (200, 201):
            raise RuntimeError(f"upload answered {uploaded.status_code}: {uploaded.text}")
        health: list[float] = []
        stop = threading.Event()

        def poll() -> None:
            with httpx.Client(base_url=base, timeout=60) as poller:
                while not stop.is_set():
                    started = time.perf_counter()
                    assert poller.get("/healthz").status_code == 200
                    health.append(time.perf_counter() - started)
                    time.sleep(0.01)

        thread = threading.Thread(target=poll)
        thread.start()
        body = {
            "contract": "bench.hostile.pattern",
            "input": {"charge": "a" * 1000 + "!", "amount_refunded": 1, "expected_seats": 0},
        }
        latencies = []
        for _ in range(requests):
            started = time.perf_counter()
            answer = client.post("/v1/operations", json=body)
            latencies.append(time.perf_counter() - started)
            if answer.status_code != 422:
                raise RuntimeError(f"create answered {answer.status_code}: {answer.text}")
        stop.set()
        thread.join()
    return {
        "p50": ms(latencies, 0.5),
        "p99": ms(latencies, 0.99),
        "max": 1000 * max(latencies),
        "health_n": len(health),
        "health_p50": ms(health, 0.5),
        "health_max": 1000 * max(health),
    }


async def page_reader(client: httpx.AsyncClient, rounds: int, sizes: list[int]) -> None:
    for _ in range(rounds):
        page = await client.get("/v1/operations?limit=200")
        if page.status_code != 200:
            raise RuntimeError(f"list answered {page.status_code}")
        sizes.append(len(page.content))


def list_figures(
    base: str, key: str, pid: int, operations: int, clients: int, rounds: int, phases: int
) -> dict[str, float]:
    headers = {"Authorization": f"Bearer {key}"}
    cap = Settings().operation_field_max_bytes
    blob = "x" * (cap - 200)
    with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
        for _ in range(operations):
            created = client.post(
                "/v1/operations",
                json={
                    "contract": "stripe.refund.succeeded",
                    "input": {**REFUND_INPUT, "note": blob},
                    "metadata": {"note": blob},
                },
            )
            if created.status_code != 201:
                raise RuntimeError(f"create answered {created.status_code}: {created.text}")
        one = client.get(f"/v1/operations/{created.json()['id']}")
        single = len(one.content)
    before = rss_kib(pid)
    peak = before
    sampling = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not sampling.is_set():
            peak = max(peak, rss_kib(pid))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    sampler.start()
    sizes: list[int] = []

    async def run() -> None:
        limits = httpx.Limits(max_connections=clients)
        async with httpx.AsyncClient(
            base_url=base, headers=headers, timeout=120, limits=limits
        ) as client:
            await asyncio.gather(*(page_reader(client, rounds, sizes) for _ in range(clients)))

    started = time.perf_counter()
    after_each: list[float] = []
    for _ in range(phases):
        asyncio.run(run())
        time.sleep(0.5)
        after_each.append(rss_kib(pid) / 1024)
    took = time.perf_counter() - started
    sampling.set()
    sampler.join()
    after = rss_kib(pid)
    return {
        "after_each": after_each,  # type: ignore[dict-item]
        "operations": operations,
        "single_kib": single / 1024,
        "page_kib": statistics.mean(sizes) / 1024,
        "pages": len(sizes),
        "seconds": took,
        "before_mib": before / 1024,
        "peak_mib": peak / 1024,
        "after_mib": after / 1024,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--operations", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--phases", type=int, default=3, help="RSS is read after each")
    parser.add_argument("--re-max", type=int, default=24)
    parser.add_argument("--write", action="store_true", help="append to docs/benchmarks.md")
    args = parser.parse_args()

    timings, re2_s = pattern_figures(args.re_max)
    tmp = Path(tempfile.mkdtemp(prefix="provely-bench-hostile-"))
    process, base, key = serve(tmp)
    try:
        requests = request_figures(base, key, args.requests)
        pages = list_figures(
            base, key, process.pid, args.operations, args.clients, args.rounds, args.phases
        )
    finally:
        process.terminate()
        process.wait(timeout=30)
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M")
    python = platform.python_version()
    slowest = timings[-1]
    field_kib = 2 * Settings().operation_field_max_bytes // 1024
    rows = [
        "| measured (UTC) | python | machine | `re`, n a's + `!` | RE2, 1,000 a's + `!` |",
        "|---|---|---|---|---|",
        f"| {when} | {python} | {machine()} | "
        + ", ".join(f"n={n}: {s * 1000:.0f} ms" for n, s in timings[-3:])
        + f" | {re2_s * 1e6:.1f} µs |",
        "",
        "| measured (UTC) | machine | hostile creates | p50 ms | p99 ms | max ms "
        "| /healthz polls meanwhile | /healthz p50 ms | /healthz max ms |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {when} | {machine()} | {args.requests} | {requests['p50']:.1f} | "
        f"{requests['p99']:.1f} | {requests['max']:.1f} | {requests['health_n']:.0f} | "
        f"{requests['health_p50']:.1f} | {requests['health_max']:.1f} |",
        "",
        "| measured (UTC) | machine | operations, input + metadata each | one operation KiB "
        "| page of 200 KiB | pages read (concurrent) | RSS before MiB | RSS peak MiB "
        "| RSS after each phase MiB |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {when} | {machine()} | {pages['operations']:.0f}, {field_kib} KiB | "
        f"{pages['single_kib']:.0f} | {pages['page_kib']:.0f} | {pages['pages']:.0f} "
        f"({args.clients}) | {pages['before_mib']:.0f} | {pages['peak_mib']:.0f} | "
        + ", ".join(f"{v:.0f}" for v in pages["after_each"])  # type: ignore[attr-defined]
        + " |",
    ]
    print(f"re n={slowest[0]}: {slowest[1]:.2f} s")
    print("\n".join(rows))
    if args.write:
        path = ROOT / "docs" / "benchmarks.md"
        text = path.read_text("utf-8")
        if SECTION not in text:
            text = text.rstrip("\n") + f"\n\n{SECTION}\n\n"
        path.write_text(text.rstrip("\n") + "\n\n" + "\n".join(rows) + "\n", "utf-8")


if __name__ == "__main__":
    main()
