"""Refused and ignored deliveries are visible (#33): with a wrong webhook secret an operation
sat PENDING and only ``status=400`` access lines said anything. ``GET /v1/deliveries`` lists
what a workspace's endpoints received — stored (with why no contract can count it, when none
can) and refused (the reason, the answer, the size; never the body) — newest first, per
connection, paged."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from services.verdict.sweeper import Sweeper
from shared.db.models import RefusedDelivery
from shared.db.tenants import create_api_key, create_workspace
from shared.intake.refusals import Refusal, record_refusals
from shared.runtime.settings import Settings

from .conftest import Tenant, TestClient, refund, signed, stripe_event

pytestmark = pytest.mark.integration


def key_of(engine: Engine, workspace_id: str) -> dict[str, str]:
    with Session(engine) as session, session.begin():
        _, plain = create_api_key(session, workspace_id, now=datetime.now(UTC))
    return {"Authorization": f"Bearer {plain}"}


def event(event_id: str, *, api_version: str = "2026-08-26") -> bytes:
    t = int(time.time())
    obj = refund("re_D", status="succeeded", created=t)
    return stripe_event(event_id, "refund.updated", obj, created=t, api_version=api_version)


def post(client: TestClient, tenant: Tenant, body: bytes, headers: dict[str, str]) -> int:
    return client.post(tenant.path, content=body, headers=headers).status_code


def test_stored_ignored_and_refused_deliveries_are_listed(
    client: TestClient, tenant: Tenant, pg_engine: Engine
) -> None:
    good, basil = event("evt_good"), event("evt_basil", api_version="2025-03-31.basil")
    assert post(client, tenant, good, signed(good)) == 200
    assert post(client, tenant, good, signed(good)) == 200  # a repeat
    assert post(client, tenant, basil, signed(basil)) == 200
    forged = event("evt_forged")
    assert post(client, tenant, forged, signed(forged, "whsec_wrong")) == 400
    not_json = b"{not json"
    assert post(client, tenant, not_json, signed(not_json)) == 400
    # No connection there: not recorded (anyone may send it).
    assert (
        client.post("/v1/events/stripe/ws_nobody", content=good, headers=signed(good)).status_code
        == 404
    )

    headers = key_of(pg_engine, tenant.workspace_id)
    listed = client.get("/v1/deliveries", headers=headers)
    assert listed.status_code == 200, listed.text
    items = listed.json()["data"]
    stored = {i["event_id"]: i for i in items if i["outcome"] == "stored"}
    refused = [i for i in items if i["outcome"] == "refused"]
    assert set(stored) == {"evt_good", "evt_basil"}
    assert stored["evt_good"]["repeats"] == 1
    assert stored["evt_good"]["ignored"] is None
    assert stored["evt_basil"]["ignored"] == "api_version 2025-03-31.basil is not among 2026-08-26"
    assert stored["evt_basil"]["ignored_reason"] == "api_version"
    assert sorted(i["reason"] for i in refused) == ["malformed_json", "no_matching_signature"]
    assert {i["http_status"] for i in refused} == {400}
    assert sorted(i["size"] for i in refused) == sorted([len(forged), len(not_json)])
    times = [i["received_at"] for i in items]
    assert times == sorted(times, reverse=True)
    # The refused rows hold no body, and none was written for the unknown address.
    with Session(pg_engine) as session:
        rows = session.execute(select(RefusedDelivery)).scalars().all()
    assert len(rows) == 2
    assert {c.name for c in RefusedDelivery.__table__.columns}.isdisjoint({"body", "raw"})

    only_refused = client.get("/v1/deliveries?outcome=refused", headers=headers).json()["data"]
    assert [i["outcome"] for i in only_refused] == ["refused", "refused"]
    other_provider = client.get("/v1/deliveries?provider=github", headers=headers).json()
    assert other_provider["data"] == []


def test_pages_cover_every_delivery_once(
    client: TestClient, tenant: Tenant, pg_engine: Engine
) -> None:
    for n in range(4):
        body = event(f"evt_p{n}")
        assert post(client, tenant, body, signed(body)) == 200
        bad = event(f"evt_bad{n}")
        assert post(client, tenant, bad, signed(bad, "whsec_wrong")) == 400
    headers = key_of(pg_engine, tenant.workspace_id)
    seen: list[tuple[str, str | None, str]] = []
    cursor = None
    for _ in range(10):
        url = "/v1/deliveries?limit=3" + (f"&cursor={cursor}" if cursor else "")
        page = client.get(url, headers=headers).json()
        seen += [(i["outcome"], i["event_id"], i["received_at"]) for i in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert len(seen) == 8
    assert sum(1 for s in seen if s[0] == "refused") == 4
    assert sorted(s[1] for s in seen if s[0] == "stored") == [f"evt_p{n}" for n in range(4)]
    bad_cursor = client.get("/v1/deliveries?cursor=nope", headers=headers)
    assert bad_cursor.status_code == 422


def test_another_workspace_sees_none_of_them(
    client: TestClient, tenant: Tenant, pg_engine: Engine
) -> None:
    body = event("evt_mine")
    assert post(client, tenant, body, signed(body)) == 200
    with Session(pg_engine) as session, session.begin():
        other, _ = create_workspace(session, "other", now=datetime.now(UTC))
        other_id = other.id
    listed = client.get("/v1/deliveries", headers=key_of(pg_engine, other_id)).json()
    assert listed["data"] == []
    assert client.get("/v1/deliveries").status_code == 401


@pytest.mark.parametrize("backend", ["pg_engine", "sqlite_engine"])
def test_the_sweeper_keeps_each_workspace_s_newest_refusals(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """Anyone who knows a workspace's address can make refused deliveries: the record keeps
    each workspace's newest ``refused_deliveries_kept`` and the sweeper deletes the rest."""
    engine: Engine = request.getfixturevalue(backend)
    start = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
    flooded, quiet = f"ws_flood_{backend}", f"ws_quiet_{backend}"
    with Session(engine) as session, session.begin():
        record_refusals(
            session,
            [
                Refusal(ws, "stripe", "conn_x", "signature_mismatch", 400, 10, at)
                for ws, count in ((flooded, 25), (quiet, 3))
                # two rows share each second: the tie is broken by the row's id
                for at in (start + timedelta(seconds=i // 2) for i in range(count))
            ],
        )
    settings = Settings(refused_deliveries_kept=10)
    report = Sweeper(engine=engine, settings=settings, send_observe=lambda *a: None).sweep_once()
    assert report.refusals_pruned == 15
    with Session(engine) as session:
        kept = session.execute(
            select(
                RefusedDelivery.workspace_id, RefusedDelivery.received_at, RefusedDelivery.id
            ).order_by(RefusedDelivery.id)
        ).all()
    flood_rows = [(at, pk) for ws, at, pk in kept if ws == flooded]
    assert len(flood_rows) == 10
    # the newest ten: the last ten inserted
    assert [at for at, _ in flood_rows] == [
        start + timedelta(seconds=i // 2) for i in range(15, 25)
    ]
    assert sum(1 for ws, _, _ in kept if ws == quiet) == 3
    # a second pass has nothing left to delete
    assert Sweeper(engine=engine, settings=settings).sweep_once().refusals_pruned == 0
