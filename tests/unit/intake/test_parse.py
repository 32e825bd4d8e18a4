"""``parse_event`` skips the storability walk only for bodies whose bytes show that nothing in
them needs escaping; whatever the body, the event it reads is the one ``json.loads`` and
``storable_copy`` make of it (the walk itself is ``tests/unit/core/test_storable.py``'s, what
is stored ``tests/integration/webhooks/test_unstorable_deliveries.py``'s)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.core.storable import MAX_JSON_DEPTH
from shared.core.storable_copy import storable_copy
from shared.intake.contracts import event_shape_for
from shared.intake.parse import MalformedEvent, parse_event
from shared.trust.signatures import VerifiedDelivery

NOW = int(time.time())


def body(extra: str = "", *, event_id: str = '"evt_1"') -> str:
    return (
        f'{{"id": {event_id}, "object": "event", "type": "refund.updated", "created": {NOW}, '
        f'"api_version": "2026-08-26", "data": {{"object": {{"id": "re_1", "object": "refund", '
        f'"amount": 1000, "status": "succeeded"{extra}}}}}}}'
    )


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


BODIES: dict[str, bytes] = {
    "plain": body().encode(),
    "plain, floats and non-ASCII": body(', "rate": 1.5, "name": "Zoë 東京 🎉"').encode(),
    "NUL escaped": body(', "note": "a\\u0000b"').encode(),
    "NUL in a key": body(', "a\\u0000b": 1').encode(),
    "lone surrogate escaped": body(', "note": "\\ud800"').encode(),
    "lone low surrogate escaped, upper case": body(', "note": "\\uDC0F"').encode(),
    "a surrogate pair escaped": body(', "note": "\\ud83c\\udf89"').encode(),
    "lone surrogate as UTF-8 bytes": body(', "note": "\ud800"').encode("utf-8", "surrogatepass"),
    "an escaped backslash before u0000": body(', "note": "\\\\u0000"').encode(),
    "1e999": body(', "x": 1e999').encode(),
    "-1e999 in the id": body(event_id="-1e999").encode(),
    "a long float": body(', "x": ' + "9" * 400 + ".0").encode(),
    "at the depth limit": body(f', "deep": {nested(MAX_JSON_DEPTH - 3)}').encode(),
    "past the depth limit": body(f', "deep": {nested(MAX_JSON_DEPTH - 2)}').encode(),
    "many brackets, shallow": body(', "list": [' + ",".join(["{}"] * 80) + "]").encode(),
    "UTF-8 with a byte order mark": b"\xef\xbb\xbf" + body().encode(),
    "UTF-16 with a byte order mark": body(', "note": "\ud800"').encode("utf-16", "surrogatepass"),
    "UTF-16-LE": body(', "note": "a\\u0000b"').encode("utf-16-le"),
    "UTF-32-BE": body().encode("utf-32-be"),
}


def _not_json(constant: str) -> Any:
    raise ValueError(constant)


def reference(raw: bytes) -> tuple[Any, tuple[str, ...]]:
    copy = storable_copy(json.loads(raw, parse_constant=_not_json))
    return copy.value, copy.places


def parsed(raw: bytes) -> Any:
    return parse_event(
        raw,
        shape=event_shape_for("stripe", "stripe"),
        delivery=VerifiedDelivery(scheme="stripe", secret_index=0, timestamp=NOW),
        received_at=datetime.now(UTC),
    )


@pytest.mark.parametrize("name", list(BODIES))
def test_the_event_read_is_the_storable_copy_of_the_parsed_body(name: str) -> None:
    raw = BODIES[name]
    value, places = reference(raw)
    event = parsed(raw)
    assert event.body == value
    assert event.escaped == places
    assert event.event_id == str(value["id"])


def test_the_escapes_are_named_where_the_walk_finds_them() -> None:
    assert parsed(BODIES["NUL escaped"]).escaped == ("data.object.note",)
    assert parsed(BODIES["lone surrogate as UTF-8 bytes"]).escaped == ("data.object.note",)
    assert parsed(BODIES["1e999"]).escaped == ("data.object.x",)
    assert parsed(BODIES["past the depth limit"]).escaped
    assert parsed(BODIES["plain, floats and non-ASCII"]).escaped == ()
    assert parsed(BODIES["many brackets, shallow"]).escaped == ()


@pytest.mark.parametrize(
    "raw", [body(', "x": NaN').encode(), body(', "x": -Infinity').encode(), b"{", b"\xff{}"]
)
def test_what_is_not_json_is_refused(raw: bytes) -> None:
    with pytest.raises(MalformedEvent) as refused:
        parsed(raw)
    assert refused.value.reason == "malformed_json"


def test_json_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(MalformedEvent) as refused:
        parsed(b'["evt"]')
    assert refused.value.reason == "malformed_event"
