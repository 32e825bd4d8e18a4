"""Benchmark: the console's operations list with a filter, at 100,000 operations in PostgreSQL.

A scratch PostgreSQL database is migrated with the real migrations; one workspace gets
``--operations`` rows written in bulk by one ``INSERT … SELECT generate_series`` (most VERIFIED,
a few in HUMAN_REVIEW, CONTRADICTED, EXPIRED…, one a second apart), a second workspace a tenth
as many (so the workspace filter has something to leave out). Then, signed in through the
console's own form, ``GET /console/operations`` is timed with each filter below (one page of
50, rendered to HTML) in the ingress application in this process; beside it, the floor: the
same page's SQL statement (``services.ingress.api.listing.summary_query``, what the console
runs) run bare on the same database in the same run. The second page of each filter is timed
too (the keyset cursor).

    .venv/bin/python bench/console.py [--operations 100000] [--requests 200]

Prints a Markdown table of p50 and p99 for the route and its floor.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from cryptography.fernet import Fernet
from sqlalchemy import text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.api import drop_database, scratch_database  # noqa: E402
from services.ingress.api.listing import (  # noqa: E402
    OperationFilters,
    decode_cursor,
    summary_query,
)
from services.ingress.app import create_app  # noqa: E402
from shared.db.migrate import upgrade  # noqa: E402
from shared.db.session import make_engine, session_scope  # noqa: E402
from shared.db.tenants import create_workspace  # noqa: E402
from shared.runtime.settings import Settings  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from fastapi.testclient import TestClient

FILTERS: dict[str, dict[str, str]] = {
    "state=HUMAN_REVIEW": {"state": "HUMAN_REVIEW"},
    "needs a person": {"needs_person": "1"},
    "verdict=VERIFIED, contract": {"verdict": "VERIFIED", "contract": "stripe.refund.succeeded"},
    "reason=status_failed": {"reason": "status_failed"},
}

# One row in ten by i % 20: (state, verdict, reason, final).
_MIX = """
CASE
  WHEN i % 20 = 0 THEN 'HUMAN_REVIEW' WHEN i % 20 = 1 THEN 'CONTRADICTED'
  WHEN i % 20 = 2 THEN 'EXPIRED' WHEN i % 20 = 3 THEN 'FAILED'
  WHEN i % 20 = 4 THEN 'OBSERVING' ELSE 'VERIFIED' END
"""
_INSERT = f"""
INSERT INTO operations (id, workspace_id, contract_id, contract_version, contract_hash,
  completion_level, state, verdict, reason, final, version, input, learned_keys, attempts,
  fence, decision, created_at, updated_at)
SELECT 'op_bench_' || :tag || '_' || lpad(i::text, 7, '0'), :ws, :cid, :cver, :chash, :level,
  s.state,
  CASE s.state WHEN 'OBSERVING' THEN 'PENDING' WHEN 'EXPIRED' THEN 'UNVERIFIABLE'
    WHEN 'HUMAN_REVIEW' THEN 'UNVERIFIABLE' ELSE s.state END,
  CASE s.state WHEN 'VERIFIED' THEN 'all_conditions_hold' WHEN 'FAILED' THEN 'status_failed'
    WHEN 'CONTRADICTED' THEN 'status_failed' WHEN 'EXPIRED' THEN 'no_action_report'
    WHEN 'HUMAN_REVIEW' THEN 'evidence_unavailable_before_timeout' ELSE NULL END,
  s.state <> 'OBSERVING', 1, '{{}}', '{{}}', 1, 1,
  CAST('{{"correlation": [{{"strategy": "idempotency_key", "assurance": "exact",
    "value": "op"}}]}}' AS json),
  :t0 - make_interval(secs => i), :t0 - make_interval(secs => i)
FROM generate_series(1, :n) AS i
CROSS JOIN LATERAL (SELECT {_MIX} AS state) AS s
"""  # noqa: S608 (the f-string adds constants only)


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered), p99


def _timed(run: Callable[[], object], count: int) -> list[float]:
    run()  # warm
    samples = []
    for _ in range(count):
        started = time.perf_counter()
        run()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _sign_in(client: TestClient, key: str) -> None:
    page = client.get("/console/sign-in").text
    token = re.search(r'name="form_token" value="([^"]+)"', page)
    assert token is not None
    client.cookies.set("provely_console_form", token.group(1), path="/console")
    answer = client.post(
        "/console/sign-in",
        data={"form_token": token.group(1), "key": key},
        follow_redirects=False,
    )
    assert answer.status_code == 303, answer.text


def _seed(client: TestClient, url: str, spaces: list[tuple[str, str, int]]) -> None:
    """One operation through the API (its contract columns), then the rest in bulk."""
    first = client.post(
        "/v1/operations",
        headers={"Authorization": f"Bearer {spaces[0][1]}"},
        json={
            "contract": "stripe.refund.succeeded",
            "input": {"charge": "ch_1", "amount": 100, "currency": "usd"},
        },
    )
    assert first.status_code == 201, first.text
    contract = first.json()["contract"]
    engine = make_engine(url)
    with engine.begin() as conn:
        for tag, (workspace_id, _, count) in enumerate(spaces):
            conn.execute(
                text(_INSERT),
                {
                    "tag": str(tag),
                    "ws": workspace_id,
                    "cid": contract["id"],
                    "cver": contract["version"],
                    "chash": contract["hash"],
                    "level": contract["completion_level"],
                    "t0": datetime.now(UTC),
                    "n": count,
                },
            )
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("ANALYZE operations"))
    engine.dispose()


def _floor(
    url: str, workspace_id: str, params: dict[str, str], cursor: str | None
) -> Callable[[], object]:
    engine = make_engine(url)
    filters = OperationFilters(
        state=params.get("state"),
        verdict=params.get("verdict"),
        reason=params.get("reason"),
        contract=params.get("contract"),
        needs_person=params.get("needs_person") == "1",
    )
    statement = summary_query(workspace_id=workspace_id, filters=filters, limit=50, cursor=cursor)

    def run() -> object:
        with session_scope(engine) as session:
            return session.execute(statement).all()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operations", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    name, url = scratch_database()
    try:
        upgrade(url)
        with tempfile.TemporaryDirectory() as tmp:
            settings = Settings(
                database_url=url,
                data_dir=Path(tmp) / "data",
                broker_url=f"sqla+sqlite:///{Path(tmp) / 'broker.db'}",
                secret_key=Fernet.generate_key().decode(),
            )
            engine = make_engine(url)
            with session_scope(engine) as session:
                now = datetime.now(UTC)
                ws_a, key_a = create_workspace(session, "bench a", now=now)
                ws_b, key_b = create_workspace(session, "bench b", now=now)
                spaces = [
                    (ws_a.id, key_a, args.operations),
                    (ws_b.id, key_b, args.operations // 10),
                ]
            engine.dispose()
            with TestClient(create_app(settings)) as client:
                _seed(client, url, spaces)
                _sign_in(client, key_a)
                print(
                    f"{args.operations:,} operations (+{args.operations // 10:,} in another "
                    f"workspace), {args.requests} requests per row, page of 50"
                )
                print("| filter | page | console route p50 / p99 (ms) | bare SQL p50 / p99 (ms) |")
                print("|---|---|---|---|")
                for label, params in FILTERS.items():
                    first = client.get("/console/operations", params=params)
                    assert first.status_code == 200, first.text
                    found = re.search(r'id="next-page" href="[^"]*cursor=([^"&]+)', first.text)
                    pages: list[tuple[str, str | None]] = [("1", None)]
                    if found is not None:
                        pages.append(("2", found.group(1)))
                    for page, cursor in pages:
                        query = dict(params, **({"cursor": cursor} if cursor else {}))
                        if cursor:
                            decode_cursor(cursor)
                        route = _timed(
                            lambda q=query: client.get("/console/operations", params=q),
                            args.requests,
                        )
                        bare = _timed(_floor(url, ws_a.id, params, cursor), args.requests)
                        r50, r99 = _percentiles(route)
                        b50, b99 = _percentiles(bare)
                        print(
                            f"| {label} | {page} | {r50:.1f} / {r99:.1f} | {b50:.2f} / {b99:.2f} |"
                        )
    finally:
        drop_database(name)


if __name__ == "__main__":
    main()
