"""A correctly signed delivery that can never be stored (NaN anywhere, a NUL character or a
lone surrogate in the event id, the type or a key, nesting past the limit) is answered 400 —
so the provider stops retrying it — stored nowhere, counted and logged once."""

from __future__ import annotations

import json
import logging
import time
import warnings

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import Engine

from shared.core.storable import MAX_JSON_DEPTH

from .conftest import Tenant, counts, refund, signed

pytestmark = pytest.mark.integration

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from fastapi.testclient import TestClient


def event_text(
    *, event_id: str = '"evt_ok"', event_type: str = '"refund.updated"', extra: str = ""
) -> bytes:
    now = int(time.time())
    obj = json.dumps(refund("re_u", status="succeeded", created=now))
    return (
        f'{{"id": {event_id}, "object": "event", "type": {event_type}, "created": {now}, '
        f'"api_version": "2026-08-26", "data": {{"object": {obj[:-1]}{extra}}}}}}}'
    ).encode("utf-8", "surrogatepass")


def deep(depth: int) -> str:
    return "[" * depth + "]" * depth


CASES = {
    "NUL in the event id": event_text(event_id='"evt_\\u0000x"'),
    "NUL in the type": event_text(event_type='"refund.\\u0000updated"'),
    "NUL in a key": event_text(extra=', "a\\u0000b": 1'),
    "lone surrogate in the id": event_text(event_id='"evt_\\ud800"'),
    "lone surrogate in a value": event_text(extra=', "note": "\\udc00"'),
    "NaN": event_text(extra=', "amount_x": NaN'),
    "Infinity": event_text(extra=', "amount_x": Infinity'),
    "1e999": event_text(extra=', "amount_x": -1e999'),
    "too deep": event_text(extra=f', "deep": {deep(MAX_JSON_DEPTH + 1)}'),
    "deep 900": event_text(extra=f', "deep": {deep(900)}'),
}


def refused_count(reason: str) -> float:
    value = REGISTRY.get_sample_value(
        "provely_events_refused_total", {"provider": "stripe", "reason": reason}
    )
    return value or 0.0


@pytest.mark.parametrize("case", list(CASES))
def test_a_signed_delivery_that_cannot_be_stored_is_refused_with_a_4xx(
    client: TestClient,
    tenant: Tenant,
    pg_engine: Engine,
    case: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    body = CASES[case]
    before = refused_count("unstorable")
    with caplog.at_level(logging.WARNING, logger="services.ingress.webhooks"):
        response = client.post(tenant.path, content=body, headers=signed(body))
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["reason"] == "unstorable"
    assert counts(pg_engine) == (0, 0, 0)
    assert refused_count("unstorable") == before + 1
    logged = [r for r in caplog.records if "cannot be stored" in r.getMessage()]
    assert len(logged) == 1
    # The same connection's next, storable delivery is stored.
    good = event_text(event_id=f'"evt_after_{abs(hash(case))}"')
    assert client.post(tenant.path, content=good, headers=signed(good)).status_code == 200
