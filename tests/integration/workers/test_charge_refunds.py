"""The listing of a charge's refunds (``charge_refunds``, stripe.refund.* 1.1.0), observed and
decided in-process on real PostgreSQL: the observer fills the query, follows the pages, stores
one list reading, and the evaluation contradicts a duplicate that no event reported.

The provider is an ``httpx.MockTransport`` that pages one refund at a time whatever ``limit``
says, so even two refunds take two pages.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl

import httpx
import pytest
from sqlalchemy import Engine, select

from services.observer.observe import ObserveOutcome, Observer
from services.verdict.evaluate import evaluate_operation
from shared.db.models import Observation, Operation
from shared.db.session import session_scope
from shared.lifecycle.scheduling import schedule_observation
from shared.runtime.ratelimit import LocalTokenBucket
from shared.runtime.settings import get_settings
from shared.trust.registry import get_registry
from tests.integration.workers.conftest import (
    API_KEY,
    SECRET_KEY,
    Cluster,
    make_tenant,
    short_contract,
)

pytestmark = pytest.mark.integration

CHARGE = "ch_list"


@pytest.fixture
def env(
    pg_engine: Engine, migrated_postgres_url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Cluster]:
    values = {
        "PROVELY_DATABASE_URL": migrated_postgres_url,
        "PROVELY_SECRET_KEY": SECRET_KEY,
        "PROVELY_DATA_DIR": str(tmp_path),
        "PROVELY_JITTER_RATIO": "0",
    }
    for key, value in values.items():
        monkeypatch.setenv(key, value)
    get_settings.cache_clear()
    yield Cluster(env=values, settings=get_settings(), engine=pg_engine, logs=tmp_path)
    get_settings.cache_clear()


class Stripe:
    """``GET /v1/refunds/{id}`` and ``GET /v1/refunds`` (one item a page, newest first)."""

    def __init__(self, created: int) -> None:
        self.created = created
        self.refunds: list[dict[str, Any]] = []  # newest first
        self.requests: list[httpx.Request] = []
        self.list_status = 200

    def add(self, refund_id: str, status: str = "succeeded") -> None:
        body = {
            "id": refund_id,
            "object": "refund",
            "amount": 1000,
            "currency": "usd",
            "charge": CHARGE,
            "status": status,
            "created": self.created,
        }
        self.refunds.insert(0, body)

    def handler(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if request.headers.get("authorization") != f"Bearer {API_KEY}":
            return httpx.Response(401, json={})
        if request.url.path == "/v1/refunds":
            if self.list_status != 200:
                return httpx.Response(self.list_status, json={"error": {"type": "api_error"}})
            params = dict(parse_qsl(request.url.query.decode()))
            rows = [r for r in self.refunds if r["charge"] == params.get("charge")]
            rows = [r for r in rows if r["created"] >= int(params["created[gte]"])]
            if "starting_after" in params:
                ids = [r["id"] for r in rows]
                rows = rows[ids.index(params["starting_after"]) + 1 :]
            body = {"object": "list", "data": rows[:1], "has_more": len(rows) > 1}
            return httpx.Response(200, json=body)
        refund_id = request.url.path.rsplit("/", 1)[-1]
        for refund in self.refunds:
            if refund["id"] == refund_id:
                return httpx.Response(200, json=refund)
        return httpx.Response(404, json={})

    def list_queries(self) -> list[dict[str, str]]:
        return [
            dict(parse_qsl(r.url.query.decode()))
            for r in self.requests
            if r.url.path == "/v1/refunds"
        ]


def _operation(
    env: Cluster, workspace_id: str, refund_id: str, *, version: str, charge: str = CHARGE
) -> tuple[str, datetime]:
    entry = get_registry().entry("stripe.refund.succeeded", version)
    # Microseconds past a whole second, so "rounded down" is visible in the query.
    created = datetime.now(UTC).replace(microsecond=654_321) - timedelta(seconds=1)
    op_id = f"op_list_{time.monotonic_ns()}"
    with session_scope(env.engine) as session:
        op = Operation(
            id=op_id,
            workspace_id=workspace_id,
            contract_id=entry.contract.id,
            contract_version=entry.contract.version,
            contract_hash=entry.hash,
            completion_level=entry.contract.completion_level,
            custom_contract_id=None,
            state="OBSERVING",
            final=False,
            version=1,
            input={"charge": charge, "amount": 1000, "currency": "usd"},
            action_result={"id": refund_id},
            action_reported_at=created,
            subject_id=refund_id,
            learned_keys={},
            attempts=0,
            fence=0,
            created_at=created,
            updated_at=created,
            deadline=created + timedelta(days=7),
        )
        session.add(op)
        session.flush()
        schedule_observation(session, op, delay_ms=0, now=created)
    return op_id, created


def _observer(env: Cluster, stripe: Stripe) -> Observer:
    return Observer(
        settings=env.settings,
        engine=env.engine,
        http=httpx.Client(transport=httpx.MockTransport(stripe.handler)),
        limiter=LocalTokenBucket(),
        sleep=lambda _s: None,
        send_evaluate=lambda _id: None,
        resend_observe=lambda *_a: None,
    )


def _rows(env: Cluster, op_id: str) -> dict[str, Observation]:
    with session_scope(env.engine) as session:
        rows = session.execute(select(Observation).where(Observation.operation_id == op_id))
        found = {row.channel: row for row in rows.scalars().all()}
        for row in found.values():
            session.expunge(row)
        return found


def _observe_and_decide(env: Cluster, stripe: Stripe, op_id: str) -> tuple[str, str, bool]:
    assert _observer(env, stripe).observe(op_id, 1) is ObserveOutcome.OBSERVED
    decision = evaluate_operation(env.engine, op_id, settings=env.settings, send=lambda *_a: None)
    assert decision is not None
    return decision.verdict.value, decision.reason, decision.final


def _tenant(env: Cluster, name: str) -> str:
    tenant = make_tenant(
        env, "http://stripe.test", short_contract(contract_id=f"t.{name}"), name=name
    )
    # Loaded now, before a test starts its provider's clock: a first load takes over a second
    # on a busy machine, and the refunds the stub made before it would predate the operation.
    get_registry()
    return tenant.workspace_id


def test_the_listing_is_paged_and_a_duplicate_no_event_reported_contradicts(env: Cluster) -> None:
    workspace = _tenant(env, "listdup")
    stripe = Stripe(created=int(time.time()))
    stripe.add("re_ours")
    stripe.add("re_other")  # a second refund of the same charge, made outside the agent
    op_id, created = _operation(env, workspace, "re_ours", version="1.1.0")

    assert _observe_and_decide(env, stripe, op_id) == (
        "CONTRADICTED",
        "duplicate_refund_by_readback",
        True,
    )
    second = int(created.timestamp())  # whole seconds, rounded down
    base = {"charge": CHARGE, "created[gte]": str(second), "limit": "100"}
    assert stripe.list_queries() == [base, {**base, "starting_after": "re_other"}]
    listing = _rows(env, op_id)["charge_refunds"]
    assert listing.status == "ok"
    assert listing.value["count"] == 2
    assert [item["id"] for item in listing.value["data"]] == ["re_other", "re_ours"]
    assert listing.digest is not None
    assert _rows(env, op_id)["refund_created_events"].value["count"] == 0


def test_one_refund_and_no_event_stays_pending(env: Cluster) -> None:
    workspace = _tenant(env, "listone")
    stripe = Stripe(created=int(time.time()))
    stripe.add("re_alone")
    op_id, _ = _operation(env, workspace, "re_alone", version="1.1.0")
    verdict, reason, final = _observe_and_decide(env, stripe, op_id)
    assert (verdict, reason, final) == ("PENDING", "awaiting_evidence", False)
    assert _rows(env, op_id)["charge_refunds"].value["count"] == 1


def test_an_operation_under_1_0_0_reads_no_listing(env: Cluster) -> None:
    workspace = _tenant(env, "listold")
    stripe = Stripe(created=int(time.time()))
    stripe.add("re_ours")
    stripe.add("re_other")
    op_id, _ = _operation(env, workspace, "re_ours", version="1.0.0")
    verdict, _reason, final = _observe_and_decide(env, stripe, op_id)
    assert (verdict, final) == ("PENDING", False)  # 1.0.0 waits for its refund.updated event
    assert stripe.list_queries() == []
    assert "charge_refunds" not in _rows(env, op_id)


def test_a_query_value_that_cannot_be_filled_is_an_error_and_nothing_is_listed(
    env: Cluster,
) -> None:
    workspace = _tenant(env, "listnoq")
    stripe = Stripe(created=int(time.time()))
    stripe.add("re_ours")
    op_id, _ = _operation(env, workspace, "re_ours", version="1.1.0", charge="")
    assert _observer(env, stripe).observe(op_id, 1) is ObserveOutcome.OBSERVED
    rows = _rows(env, op_id)
    assert (rows["charge_refunds"].status, rows["charge_refunds"].error) == (
        "error",
        "query_unresolved",
    )
    assert rows["refund_readback"].status == "ok"  # the other readback is still read
    assert stripe.list_queries() == []


def test_a_listing_the_provider_cannot_answer_is_unavailable_and_decides_nothing(
    env: Cluster,
) -> None:
    workspace = _tenant(env, "list503")
    stripe = Stripe(created=int(time.time()))
    stripe.add("re_ours")
    stripe.add("re_other")
    stripe.list_status = 503
    op_id, _ = _operation(env, workspace, "re_ours", version="1.1.0")
    verdict, reason, final = _observe_and_decide(env, stripe, op_id)
    assert (verdict, reason, final) == ("UNVERIFIABLE", "evidence_unavailable", False)
    row = _rows(env, op_id)["charge_refunds"]
    assert (row.status, row.error) == ("unavailable", "http_503")
