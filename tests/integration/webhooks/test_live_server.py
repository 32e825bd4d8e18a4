"""Against a live uvicorn process: concurrent repeats of one event, and bodies that must be
refused without being buffered (memory of the server process measured from /proc)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from shared.db.models import Event

from .conftest import LiveServer, Tenant, counts, refund, signed, stripe_event

pytestmark = pytest.mark.integration

MiB = 1024 * 1024


def test_fifty_concurrent_deliveries_of_one_event_store_one_row(
    live_server: LiveServer, tenant: Tenant, pg_engine: Engine
) -> None:
    t = int(time.time())
    body = stripe_event(
        "evt_storm", "refund.updated", refund("re_storm", status="succeeded", created=t), created=t
    )

    async def storm() -> list[httpx.Response]:
        limits = httpx.Limits(max_connections=50)
        async with httpx.AsyncClient(base_url=live_server.url, limits=limits, timeout=60) as c:
            return await asyncio.gather(
                *[c.post(tenant.path, content=body, headers=signed(body)) for _ in range(50)]
            )

    responses = asyncio.run(storm())
    assert [r.status_code for r in responses] == [200] * 50
    assert sum(1 for r in responses if r.json()["duplicate"] is False) == 1
    assert counts(pg_engine)[0] == 1
    with Session(pg_engine) as session:
        assert session.execute(select(Event.duplicates)).scalar_one() == 49


class Endless:
    """A 1 GiB chunked body produced on the fly; counts what the client managed to send."""

    def __init__(self, total: int, chunk: int = 64 * 1024) -> None:
        self.total, self.chunk, self.sent = total, chunk, 0

    def __iter__(self) -> Iterator[bytes]:
        block = b"x" * self.chunk
        while self.sent < self.total:
            self.sent += self.chunk
            yield block


def test_oversized_bodies_are_refused_without_buffering(
    live_server: LiveServer, tenant: Tenant, pg_engine: Engine
) -> None:
    with httpx.Client(base_url=live_server.url, timeout=120) as client:
        # warm the process up (imports, pools) before measuring
        small = stripe_event("evt_warm", "ping", {"id": "x"}, created=int(time.time()))
        assert client.post(tenant.path, content=small, headers=signed(small)).status_code == 200
        baseline = live_server.rss_kib()

        ten = b"{" + b"x" * (10 * MiB) + b"}"
        response = client.post(tenant.path, content=ten, headers=signed(ten))
        assert response.status_code == 413

        body = Endless(1024 * MiB)
        response = client.post(
            tenant.path,
            content=iter(body),
            headers={"Stripe-Signature": "t=1,v1=00", "Content-Type": "application/json"},
        )
        assert response.status_code == 413
        assert response.headers["content-type"].startswith("application/problem+json")
        # the server closed the connection instead of draining the rest: only what fits in
        # the socket buffers left the client
        assert body.sent < 64 * MiB, f"{body.sent / MiB:.0f} MiB were sent"
        growth_mib = (live_server.rss_kib() - baseline) / 1024
    assert growth_mib < 20, f"server RSS grew by {growth_mib:.1f} MiB"
    assert counts(pg_engine)[0] == 1  # only the warm-up event
