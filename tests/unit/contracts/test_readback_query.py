"""An http readback's ``query`` and ``paginate``: the model, the hash, the filling, lint, the page.

The 1.0.0 contracts have neither field; they must serialise, and hash, exactly as before the
fields existed (the hashes are pinned below: operations bound to them keep deciding with them).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from shared.core.contract import (
    Channel,
    Contract,
    HttpVerifier,
    Paginate,
    canonical_json,
    contract_hash,
)
from shared.core.engine import decide
from shared.core.expressions import EvaluationContext
from shared.core.lint.contract import lint_contract
from shared.core.lint.document import validate_contract
from shared.core.render import render_page
from shared.core.templates import fill_query
from shared.core.types import Observation, ObservationStatus, OperationFacts
from tests.unit.contracts.helpers import (
    CREATED,
    CREATED_1_1,
    SUCCEEDED,
    SUCCEEDED_1_1,
    contract_data,
)

PINNED = {
    SUCCEEDED: "08b6a6e1c36dae515330bf4a2239bf1215dc27adfe2c98a579190deb548b2df0",
    CREATED: "334628efc15ebbf8594c819cde00b4546abf463a160d8351d98c2cfdba9b9b68",
}


@pytest.mark.parametrize("path", sorted(PINNED), ids=lambda p: p.name)
def test_the_1_0_0_contracts_keep_their_hashes(path: Any) -> None:
    contract = Contract.model_validate(contract_data(path))
    assert contract.version == "1.0.0"
    assert contract_hash(contract) == PINNED[path]
    http = [ch["http"] for ch in contract.document()["channels"] if ch["verifier"] == "http"]
    assert http == [{"method": "GET", "path": "/v1/refunds/{$correlation.refund_id}"}]
    assert b'"query"' not in canonical_json(contract.document())
    assert b'"paginate"' not in canonical_json(contract.document())


def _charge_refunds(contract: Contract) -> Channel:
    channel = contract.channel("charge_refunds")
    assert channel is not None
    assert channel.http is not None
    return channel


@pytest.mark.parametrize("path", [SUCCEEDED_1_1, CREATED_1_1], ids=lambda p: p.name)
def test_the_1_1_0_contracts_list_the_charge_and_round_trip(path: Any) -> None:
    contract, errors = validate_contract(contract_data(path), file=str(path))
    assert errors == []
    assert contract is not None
    assert contract.version == "1.1.0"
    http = _charge_refunds(contract).http
    assert http is not None
    assert (http.method, http.path) == ("GET", "/v1/refunds")
    assert http.query == {
        "charge": "$input.charge",
        "created[gte]": "$operation.created_at",
        "limit": 100,
    }
    assert http.paginate == Paginate(style="stripe_list", max_pages=10)
    document = contract.document()
    listed = next(ch for ch in document["channels"] if ch["name"] == "charge_refunds")
    assert listed["http"]["paginate"] == {"style": "stripe_list", "max_pages": 10}
    again = Contract.model_validate(document)
    assert again == contract
    assert contract_hash(again) == contract_hash(contract)


@pytest.mark.parametrize(
    ("old", "new"),
    [(SUCCEEDED, SUCCEEDED_1_1), (CREATED, CREATED_1_1)],
    ids=["succeeded", "created"],
)
def test_1_1_0_keeps_every_row_of_1_0_0(old: Any, new: Any) -> None:
    before = Contract.model_validate(contract_data(old))
    after = Contract.model_validate(contract_data(new))
    assert (after.id, after.completion_level) == (before.id, before.completion_level)
    for section in ("channels", "completion", "negative", "verdict_map", "sources"):
        kept = [row for row in getattr(after, section)]
        for row in getattr(before, section):
            assert row in kept, f"{section}: {row} is missing from 1.1.0"
    assert after.timing == before.timing
    assert after.correlation == before.correlation
    assert after.evidence == before.evidence
    assert after.subject == before.subject
    assert after.input == before.input
    added = {n.id for n in after.negative} - {n.id for n in before.negative}
    assert added == {"duplicate_refund_by_readback", "other_refund_created"}
    other = next(n for n in after.negative if n.id == "other_refund_created")
    assert (other.class_, other.path, other.op.value, other.value) == (
        "duplicate side effect",
        "$observed.other_refund_created_events.count",
        "gte",
        1,
    )
    duplicate = next(n for n in after.negative if n.id == "duplicate_refund_by_readback")
    assert (duplicate.class_, duplicate.path, duplicate.op.value, duplicate.value) == (
        "duplicate side effect",
        "$observed.charge_refunds.count",
        "gt",
        1,
    )


def test_a_default_query_and_paging_are_left_out_but_a_given_one_changes_the_hash() -> None:
    plain = HttpVerifier(path="/v1/refunds")
    assert plain.model_dump(mode="json") == {"method": "GET", "path": "/v1/refunds"}
    data = contract_data(SUCCEEDED)
    base = contract_hash(Contract.model_validate(data))
    data["channels"][0]["http"]["query"] = {"expand": "charge"}
    with_query = Contract.model_validate(data)
    assert contract_hash(with_query) != base
    data["channels"][0]["http"]["paginate"] = {"style": "stripe_list"}
    paged = Contract.model_validate(data)
    assert paged.channels[0].http is not None
    assert paged.channels[0].http.paginate == Paginate(style="stripe_list", max_pages=10)
    assert contract_hash(paged) not in (base, contract_hash(with_query))


@pytest.mark.parametrize(
    ("http", "field"),
    [
        ({"path": "/v1/refunds", "query": {"charge": 1.5}}, "query"),
        ({"path": "/v1/refunds", "query": {"charge": True}}, "query"),
        ({"path": "/v1/refunds", "query": {"charge": ["a"]}}, "query"),
        ({"path": "/v1/refunds", "paginate": {"style": "cursor"}}, "paginate"),
        ({"path": "/v1/refunds", "paginate": {"style": "stripe_list", "pages": 3}}, "paginate"),
        ({"method": "POST", "path": "/v1/refunds", "paginate": {"style": "stripe_list"}}, "method"),
    ],
)
def test_the_schema_refuses_what_a_query_or_paging_cannot_be(http: Any, field: str) -> None:
    with pytest.raises(ValidationError) as exc:
        HttpVerifier.model_validate(http)
    assert any(err["loc"][0] == field for err in exc.value.errors())


# --------------------------------------------------------------------------- filling


CREATED_AT = datetime(2026, 12, 1, 19, 0, 0, 999_999, tzinfo=UTC)
SECOND = int(datetime(2026, 12, 1, 19, 0, 0, tzinfo=UTC).timestamp())


def _context(**input: Any) -> EvaluationContext:
    return EvaluationContext(
        input=input, operation_id="op_1", operation_created_at=CREATED_AT, correlation={}
    )


def test_fill_query_encodes_names_and_values_and_writes_times_in_whole_seconds_down() -> None:
    query = {"limit": 100, "created[gte]": "$operation.created_at", "charge": "$input.charge"}
    filled = fill_query(query, _context(charge="ch_1/&=?x"))
    assert filled == f"charge=ch_1%2F%26%3D%3Fx&created%5Bgte%5D={SECOND}&limit=100"


@pytest.mark.parametrize(
    ("moment", "second"),
    [
        (datetime(2026, 12, 1, 19, 0, 0, tzinfo=UTC), SECOND),
        (datetime(2026, 12, 1, 19, 0, 0, 1, tzinfo=UTC), SECOND),
        (datetime(2026, 12, 1, 19, 0, 0, 999_999, tzinfo=UTC), SECOND),
        (datetime(2026, 12, 1, 19, 0, 1, tzinfo=UTC), SECOND + 1),
        (datetime(2026, 12, 1, 20, 0, 0, 500_000, tzinfo=UTC) + timedelta(hours=-1), SECOND),
        (datetime(2026, 12, 1, 19, 0, 0, 700_000), SECOND),  # naive: read as UTC
    ],
)
def test_a_time_is_rounded_down_to_the_second(moment: datetime, second: int) -> None:
    context = EvaluationContext(operation_created_at=moment)
    assert fill_query({"t": "$operation.created_at"}, context) == f"t={second}"


@pytest.mark.parametrize(
    "input",
    [{}, {"charge": ""}, {"charge": None}, {"charge": True}, {"charge": 1.5}, {"charge": ["a"]}],
)
def test_a_value_that_cannot_fill_the_query_leaves_it_unresolved(input: dict[str, Any]) -> None:
    assert fill_query({"charge": "$input.charge", "limit": 100}, _context(**input)) is None


def test_an_unknown_time_leaves_the_query_unresolved() -> None:
    assert fill_query({"t": "$operation.created_at"}, EvaluationContext()) is None


def test_an_empty_query_is_the_empty_string() -> None:
    assert fill_query({}, _context()) == ""


# --------------------------------------------------------------------------- lint


def _lint_with_http(http: dict[str, Any]) -> list[tuple[str, str]]:
    data = contract_data(SUCCEEDED_1_1)
    channel = next(ch for ch in data["channels"] if ch["name"] == "charge_refunds")
    channel["http"] = http
    _contract, errors = validate_contract(data, file="x.yaml")
    return [(e.field, e.message) for e in errors]


def _http(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "method": "GET",
        "path": "/v1/refunds",
        "query": {"charge": "$input.charge", "limit": 100},
        "paginate": {"style": "stripe_list", "max_pages": 10},
    }
    base.update(changes)
    return base


WHERE = "channels[1].http"


@pytest.mark.parametrize(
    ("http", "expected"),
    [
        (
            _http(query={"charge": "$input.nope"}),
            [
                (
                    f"{WHERE}.query.charge",
                    "$input.nope: input nope is not declared in the input section",
                )
            ],
        ),
        (
            _http(query={"charge": "$nothing.x"}),
            [(f"{WHERE}.query.charge", "unknown root $nothing")],
        ),
        (
            _http(query={"charge": "$event.data.object.charge"}),
            [
                (
                    f"{WHERE}.query.charge",
                    "$event.data.object.charge: $event is only valid inside a webhook "
                    "channel's match rules",
                )
            ],
        ),
        (
            _http(query={"charge": "$observed.refund_readback.charge"}),
            [
                (
                    f"{WHERE}.query.charge",
                    "a readback query cannot depend on observations "
                    "($observed.refund_readback.charge)",
                )
            ],
        ),
        (
            _http(query={"charge": ""}),
            [(f"{WHERE}.query.charge", "an empty literal: leave the parameter out instead")],
        ),
        (
            _http(query={"": "x"}),
            [(f"{WHERE}.query", "query parameter name '' is empty or padded")],
        ),
        (
            _http(query={"charge": "$input.charge", "starting_after": "re_1"}),
            [
                (
                    f"{WHERE}.query.starting_after",
                    "the pager sets the cursor itself (stripe_list pages with starting_after); "
                    "leave it out of the query",
                )
            ],
        ),
        (
            _http(paginate={"style": "stripe_list", "max_pages": 0}),
            [(f"{WHERE}.paginate.max_pages", "must be from 1 to 100, got 0")],
        ),
        (
            _http(paginate={"style": "stripe_list", "max_pages": 101}),
            [(f"{WHERE}.paginate.max_pages", "must be from 1 to 100, got 101")],
        ),
    ],
)
def test_lint_checks_the_query_and_the_paging(
    http: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    assert _lint_with_http(http) == expected


@pytest.mark.parametrize("pages", [1, 100])
def test_lint_accepts_the_bounds_of_max_pages(pages: int) -> None:
    assert _lint_with_http(_http(paginate={"style": "stripe_list", "max_pages": pages})) == []


def test_lint_accepts_cursor_names_in_a_query_without_paging() -> None:
    assert _lint_with_http(_http(query={"starting_after": "re_1"}, paginate=None)) == []


def test_lint_refuses_a_boolean_input_in_a_query() -> None:
    data = contract_data(SUCCEEDED_1_1)
    data["input"]["flag"] = {"type": "boolean"}
    channel = next(ch for ch in data["channels"] if ch["name"] == "charge_refunds")
    channel["http"]["query"]["flag"] = "$input.flag"
    _, errors = validate_contract(data, file="x.yaml")
    assert [(e.field, e.message) for e in errors] == [
        (f"{WHERE}.query.flag", "$input.flag is a boolean, which does not fill a query value")
    ]


def test_lint_refuses_paging_a_readback_that_is_not_a_get() -> None:
    # The schema admits GET only; lint still says why should the method ever widen.
    contract = Contract.model_validate(contract_data(SUCCEEDED_1_1))
    channels = list(contract.channels)
    channel = _charge_refunds(contract)
    assert channel.http is not None
    posting = HttpVerifier.model_construct(
        method="POST",
        path=channel.http.path,
        query=channel.http.query,
        paginate=channel.http.paginate,
    )
    channels[1] = channel.model_copy(update={"http": posting})
    changed = contract.model_copy(update={"channels": tuple(channels)})
    errors = lint_contract(changed, file="x.yaml")
    assert [(e.field, e.message) for e in errors] == [
        (f"{WHERE}.paginate", "pages are read with GET, not POST")
    ]


# --------------------------------------------------------------------------- the page


def test_the_page_shows_no_query_for_a_plain_readback() -> None:
    page = render_page(Contract.model_validate(contract_data(SUCCEEDED)))
    assert "| `refund_readback` | `GET /v1/refunds/{$correlation.refund_id}` | 250 ms |" in page
    assert "every page read" not in page


def test_the_page_shows_a_query_without_paging() -> None:
    data = contract_data(SUCCEEDED)
    data["channels"][0]["http"]["query"] = {"expand": "charge"}
    page = render_page(Contract.model_validate(data))
    assert (
        "| `refund_readback` | `GET /v1/refunds/{$correlation.refund_id}` with "
        "`expand` = `charge` | 250 ms |"
    ) in page
    assert "every page read" not in page


# --------------------------------------------------------------------------- 1.1.0's decisions


T0 = datetime(2026, 12, 1, 12, 0, 0, 250_000, tzinfo=UTC)
NOW = T0 + timedelta(seconds=6)


def _facts() -> OperationFacts:
    return OperationFacts(
        id="op_1",
        created_at=T0,
        input={"charge": "ch_1", "amount": 2000, "currency": "usd"},
        action_result={"id": "re_ours", "status": "pending"},
        action_reported_at=T0 + timedelta(seconds=1),
        action_phase="result",
        deadline=T0 + timedelta(days=7),
    )


def _refund_body(ident: str, status: str = "succeeded") -> dict[str, Any]:
    created = int(T0.timestamp()) + 1
    return {
        "id": ident,
        "object": "refund",
        "charge": "ch_1",
        "amount": 2000,
        "currency": "usd",
        "status": status,
        "created": created,
    }


def _listing(*ids: str) -> dict[str, Any]:
    data = [_refund_body(i) for i in ids]
    return {"object": "list", "data": data, "has_more": False, "count": len(data)}


def _events(count: int) -> dict[str, Any]:
    return {"events": [], "count": count, "latest": None, "earliest": None, "types": []}


def _decision(
    path: Any,
    *,
    listing: Observation | None,
    succeeded_events: int = 1,
    created_events: int = 1,
    status: str = "succeeded",
) -> tuple[str, str, bool]:
    contract = Contract.model_validate(contract_data(path))
    observations = [
        Observation("refund_readback", NOW, ObservationStatus.OK, _refund_body("re_ours", status)),
        Observation("refund_created_events", NOW, ObservationStatus.OK, _events(created_events)),
    ]
    if contract.channel("refund_succeeded_events") is not None:
        observations.append(
            Observation(
                "refund_succeeded_events", NOW, ObservationStatus.OK, _events(succeeded_events)
            )
        )
    if listing is not None:
        observations.append(listing)
    decision = decide(contract, _facts(), observations, NOW)
    return decision.verdict.value, decision.reason, decision.final


def _listed(*ids: str, at: datetime = NOW) -> Observation:
    return Observation("charge_refunds", at, ObservationStatus.OK, _listing(*ids))


BOTH_1_1 = pytest.mark.parametrize(
    "path", [SUCCEEDED_1_1, CREATED_1_1], ids=["succeeded", "created"]
)


@BOTH_1_1
def test_a_second_refund_seen_by_readback_alone_contradicts(path: Any) -> None:
    # Not one event about the second refund: refund_created_events still counts one.
    outcome = _decision(path, listing=_listed("re_other", "re_ours"), created_events=1)
    assert outcome == ("CONTRADICTED", "duplicate_refund_by_readback", True)
    none_at_all = _decision(
        path, listing=_listed("re_other", "re_ours"), created_events=0, succeeded_events=0
    )
    assert none_at_all == ("CONTRADICTED", "duplicate_refund_by_readback", True)


@BOTH_1_1
def test_one_refund_listed_verifies_as_1_0_0_did(path: Any) -> None:
    assert _decision(path, listing=_listed("re_ours")) == ("VERIFIED", "all_conditions_hold", True)


@BOTH_1_1
def test_without_a_usable_listing_nothing_verifies(path: Any) -> None:
    assert _decision(path, listing=None)[0] == "PENDING"
    unavailable = Observation("charge_refunds", NOW, ObservationStatus.UNAVAILABLE)
    assert _decision(path, listing=unavailable)[:2] == ("UNVERIFIABLE", "evidence_unavailable")
    too_many = Observation("charge_refunds", NOW, ObservationStatus.ERROR)
    assert _decision(path, listing=too_many)[0] != "VERIFIED"
    stale = _listed("re_ours", at=NOW - timedelta(seconds=11))
    assert _decision(path, listing=stale)[:2] == ("PENDING", "stale_reading")


def test_1_0_0_under_the_same_readings_still_verifies_a_duplicate_it_has_no_event_for() -> None:
    # Why 1.1.0 exists: 1.0.0 reads no listing, and sees the duplicate only by its event.
    outcome = _decision(SUCCEEDED, listing=None, created_events=1)
    assert outcome == ("VERIFIED", "all_conditions_hold", True)


def test_no_events_at_all_and_one_refund_stays_pending_under_succeeded_1_1_0() -> None:
    outcome = _decision(
        SUCCEEDED_1_1, listing=_listed("re_ours"), created_events=0, succeeded_events=0
    )
    assert outcome == ("PENDING", "awaiting_evidence", False)
