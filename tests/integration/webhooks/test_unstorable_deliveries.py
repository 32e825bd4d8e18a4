"""A correctly signed delivery whose body is JSON is stored, always — even when it holds what no
table can hold (a NUL character or a lone surrogate in its id, its type, a key or a value,
``1e999``, nesting past the limit): its raw bytes verbatim, and a copy with those places
escaped and named in ``events.escaped``, which matching reads (#33). Only a body that is not
JSON (``NaN`` and ``Infinity`` are not) is refused, and then nothing is stored."""

from __future__ import annotations

import json
import time
import warnings

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from shared.core.storable import MAX_JSON_DEPTH
from shared.core.storable_copy import TOO_DEEP
from shared.db.models import Event, EventKey

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


# case: (body, stored event id, an escaped place, what the copy holds there)
STORED = {
    "NUL in a note (the issue's case)": (
        event_text(event_id='"evt_note"', extra=', "note": "a\\u0000b"'),
        "evt_note",
        "data.object.note",
        "a\\u0000b",
    ),
    "NUL in the event id": (
        event_text(event_id='"evt_\\u0000x"'),
        "evt_\\u0000x",
        "id",
        "evt_\\u0000x",
    ),
    "NUL in the type": (
        event_text(event_id='"evt_type"', event_type='"refund.\\u0000updated"'),
        "evt_type",
        "type",
        "refund.\\u0000updated",
    ),
    "NUL in a key": (
        event_text(event_id='"evt_key"', extra=', "a\\u0000b": 1'),
        "evt_key",
        "data.object.a\\u0000b",
        1,
    ),
    "lone surrogate in the id": (
        event_text(event_id='"evt_\\ud800"'),
        "evt_\\ud800",
        "id",
        "evt_\\ud800",
    ),
    "lone surrogate in a value": (
        event_text(event_id='"evt_sur"', extra=', "note": "\\udc00"'),
        "evt_sur",
        "data.object.note",
        "\\udc00",
    ),
    "1e999": (
        event_text(event_id='"evt_big"', extra=', "amount_x": -1e999'),
        "evt_big",
        "data.object.amount_x",
        "-inf",
    ),
    "too deep": (
        event_text(event_id='"evt_deep"', extra=f', "deep": {deep(MAX_JSON_DEPTH + 1)}'),
        "evt_deep",
        "data.object.deep" + "[0]" * (MAX_JSON_DEPTH - 3),
        TOO_DEEP,
    ),
    "deep 900": (
        event_text(event_id='"evt_deep900"', extra=f', "deep": {deep(900)}'),
        "evt_deep900",
        "data.object.deep" + "[0]" * (MAX_JSON_DEPTH - 3),
        TOO_DEEP,
    ),
}


def at(doc: object, place: str) -> object:
    """The value at a dotted place with ``[i]`` indexes (keys hold no dots here)."""
    head, *indexes = place.split("[")
    value = doc
    for part in head.split("."):
        assert isinstance(value, dict)
        value = value[part]
    for index in indexes:
        assert isinstance(value, list)
        value = value[int(index.rstrip("]"))]
    return value


@pytest.mark.parametrize("case", list(STORED))
def test_a_signed_json_delivery_is_stored_with_its_unstorable_places_escaped(
    client: TestClient, tenant: Tenant, pg_engine: Engine, case: str
) -> None:
    body, event_id, place, copied = STORED[case]
    response = client.post(tenant.path, content=body, headers=signed(body))
    assert response.status_code == 200, response.text
    with Session(pg_engine) as session:
        row = session.execute(
            select(Event).where(
                Event.workspace_id == tenant.workspace_id, Event.event_id == event_id
            )
        ).scalar_one()
        keys = dict(
            session.execute(
                select(EventKey.name, EventKey.value).where(EventKey.event_pk == row.id)
            ).all()
        )
    assert bytes(row.raw) == body  # the provider's bytes, verbatim
    assert row.escaped is not None
    assert place in row.escaped
    assert at(row.body, place) == copied
    assert keys.get("object_id") == "re_u"  # matching reads the copy
    # A repeat is a duplicate like any other.
    again = client.post(tenant.path, content=body, headers=signed(body))
    assert again.status_code == 200
    assert again.json().get("duplicate") is True


def test_a_body_stored_as_sent_is_not_marked(
    client: TestClient, tenant: Tenant, pg_engine: Engine
) -> None:
    body = event_text(event_id='"evt_plain"', extra=', "note": "a\\\\u0000b"')
    assert client.post(tenant.path, content=body, headers=signed(body)).status_code == 200
    with Session(pg_engine) as session:
        row = session.execute(select(Event).where(Event.event_id == "evt_plain")).scalar_one()
    assert row.escaped is None
    assert row.body["data"]["object"]["note"] == "a\\u0000b"


def refused_count(reason: str) -> float:
    value = REGISTRY.get_sample_value(
        "provely_events_refused_total", {"provider": "stripe", "reason": reason}
    )
    return value or 0.0


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_a_body_that_is_not_json_is_refused_and_nothing_is_stored(
    client: TestClient, tenant: Tenant, pg_engine: Engine, literal: str
) -> None:
    body = event_text(event_id='"evt_nan"', extra=f', "amount_x": {literal}')
    before = refused_count("malformed_json")
    response = client.post(tenant.path, content=body, headers=signed(body))
    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.json()["reason"] == "malformed_json"
    assert counts(pg_engine) == (0, 0, 0)
    assert refused_count("malformed_json") == before + 1
