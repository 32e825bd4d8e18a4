"""Per-channel providers and the shipped seed-003 example (pure: no I/O beyond reading files).

A channel may name the provider it observes; without one it observes the contract's skill
provider, and a contract that names none serialises (and hashes) exactly as before the field
existed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shared.core.context import build_context
from shared.core.contract import Contract, canonical_json, contract_hash
from shared.core.engine import decide
from shared.core.events import reduce_events
from shared.core.lint.document import validate_contract
from shared.core.render import render_page
from shared.core.types import EventRecord, Observation, ObservationStatus, OperationFacts
from shared.trust.registry import load_registry
from shared.trust.skills import load_trusted_keys, verify_skill
from tests.unit.contracts.helpers import CONTRACTS, SUCCEEDED, contract_data, load_yaml

EXAMPLES = CONTRACTS / "examples"
ENTITLEMENT = EXAMPLES / "app.entitlement.revoked.yaml"


def _keys() -> Any:
    return load_trusted_keys([CONTRACTS / "keys"])


def test_a_channel_without_provider_observes_the_skill_provider() -> None:
    contract = Contract.model_validate(contract_data(SUCCEEDED))
    assert all(ch.provider is None for ch in contract.channels)
    assert {ch.provider_of(contract) for ch in contract.channels} == {"stripe"}
    # No "provider" key at all: the canonical JSON is what it was before the field existed.
    assert all("provider" not in ch for ch in contract.document()["channels"])
    assert b'"provider":null' not in canonical_json(contract.document())


def test_a_named_provider_is_kept_and_changes_the_hash() -> None:
    data = contract_data(SUCCEEDED)
    plain = Contract.model_validate(data)
    data["channels"][1]["provider"] = "stripe"
    named = Contract.model_validate(data)
    assert named.document()["channels"][1]["provider"] == "stripe"
    assert contract_hash(named) != contract_hash(plain)
    assert Contract.model_validate(named.document()) == named


@pytest.mark.parametrize("bad", ["Stripe", "stripe-eu", "1http", ""])
def test_lint_refuses_a_provider_that_is_not_a_provider_id(bad: str) -> None:
    data = contract_data(SUCCEEDED)
    data["channels"][0]["provider"] = bad
    contract, errors = validate_contract(data, file="x.yaml")
    assert contract is None
    assert [(e.field, e.message) for e in errors] == [
        (
            "channels[0].provider",
            "a provider id is lower-case letters, digits and _ (as a skill names it)",
        )
    ]


def test_lint_refuses_a_provider_that_is_not_a_string() -> None:
    data = contract_data(SUCCEEDED)
    data["channels"][0]["provider"] = 7
    _, errors = validate_contract(data, file="x.yaml")
    assert [e.field for e in errors] == ["channels[0].provider"]


def test_the_entitlement_example_lints_and_reads_two_providers() -> None:
    contract, errors = validate_contract(load_yaml(ENTITLEMENT), file=str(ENTITLEMENT))
    assert errors == []
    assert contract is not None
    providers = {ch.name: (ch.verifier, ch.provider_of(contract)) for ch in contract.channels}
    assert providers == {
        "entitlement_readback": ("http", "http"),
        "charge_refunded_events": ("webhook", "stripe"),
    }
    ids = [c.id for c in contract.completion] + [n.id for n in contract.negative]
    assert "entitlement_seats_match" in ids
    stale = next(n for n in contract.negative if n.id == "entitlement_not_revoked")
    assert stale.class_ == "stale entitlement"
    assert stale.path == "$observed.entitlement_readback.seats"
    # Inputs carry the charge, the refunded total and the expected seats: no number in code.
    assert set(contract.input) == {"charge", "amount_refunded", "expected_seats"}
    page = render_page(contract, digest=contract_hash(contract))
    assert "provider `stripe`: events `charge.refunded`" in page


def test_the_example_skill_is_signed_by_the_project_key_and_loads() -> None:
    check = verify_skill(EXAMPLES, _keys())
    assert check.ok, check.problems
    assert check.manifest.provider == "http"
    registry = load_registry([EXAMPLES], trusted_keys=_keys(), allow_unsigned=False)
    entry = registry.entry("app.entitlement.revoked")
    assert entry.signed
    assert entry.certification == "example"


def test_one_changed_byte_in_the_example_is_refused(tmp_path: Path) -> None:
    from shared.trust.registry import RegistryError

    copy = tmp_path / "examples"
    copy.mkdir()
    for path in EXAMPLES.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    target = copy / ENTITLEMENT.name
    target.write_bytes(target.read_bytes().replace(b"max_attempts: 20", b"max_attempts: 21"))
    with pytest.raises(RegistryError) as exc:
        load_registry([copy], trusted_keys=_keys(), allow_unsigned=False)
    assert f"{target}: content differs from the sha256" in "\n".join(exc.value.problems)


# --------------------------------------------------------------------------- the example's verdicts

T0 = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
CHARGE = "ch_seed003"


def _example() -> Contract:
    contract, errors = validate_contract(load_yaml(ENTITLEMENT), file=str(ENTITLEMENT))
    assert contract is not None, errors
    return contract


def _facts(expected_seats: int = 0, total: int = 5000) -> OperationFacts:
    return OperationFacts(
        id="op_seed003",
        created_at=T0,
        input={"charge": CHARGE, "amount_refunded": total, "expected_seats": expected_seats},
        action_result={"id": "re_1", "charge": CHARGE, "status": "pending"},
        action_reported_at=T0 + timedelta(seconds=1),
        action_phase="result",
        deadline=T0 + timedelta(days=3),
    )


def _refunded(event_id: str, *, total: int, at: datetime, charge: str = CHARGE) -> EventRecord:
    body = {
        "id": event_id,
        "type": "charge.refunded",
        "created": int(at.timestamp()),
        "api_version": "2026-08-26",
        "data": {"object": {"id": charge, "object": "charge", "amount_refunded": total}},
    }
    return EventRecord(event_id, "charge.refunded", at, body, "2026-08-26")


def _decide(
    *, seats: int | None, events: list[EventRecord], expected_seats: int = 0, total: int = 5000
) -> tuple[str, str, str | None]:
    contract = _example()
    facts = _facts(expected_seats, total)
    now = T0 + timedelta(seconds=5)
    channel = contract.channel("charge_refunded_events")
    assert channel is not None
    reduced = reduce_events(
        channel,
        events,
        context=build_context(contract, facts),
        operation_created_at=T0,
        api_versions=contract.provider_api_versions,
    )
    observations = [Observation("charge_refunded_events", now, ObservationStatus.OK, reduced)]
    if seats is not None:
        value = {"charge": CHARGE, "seats": seats}
        observations.append(Observation("entitlement_readback", now, ObservationStatus.OK, value))
    decision = decide(contract, facts, observations, now)
    return decision.verdict.value, decision.reason, decision.class_


AFTER = T0 + timedelta(seconds=2)


@pytest.mark.parametrize(
    ("case", "seats", "events", "expected_seats", "total", "outcome"),
    [
        (
            "full refund revoked",
            0,
            [_refunded("evt_1", total=5000, at=AFTER)],
            0,
            5000,
            ("VERIFIED", "all_conditions_hold", None),
        ),
        (
            "replayed event counts once",
            0,
            [_refunded("evt_1", total=5000, at=AFTER), _refunded("evt_1", total=5000, at=AFTER)],
            0,
            5000,
            ("VERIFIED", "all_conditions_hold", None),
        ),
        (
            "partial refund keeps 3",
            3,
            [_refunded("evt_1", total=2000, at=AFTER)],
            3,
            2000,
            ("VERIFIED", "all_conditions_hold", None),
        ),
        (
            "refund ignored",
            5,
            [_refunded("evt_1", total=5000, at=AFTER)],
            0,
            5000,
            ("CONTRADICTED", "entitlement_not_revoked", "stale entitlement"),
        ),
        (
            "partial treated as full",
            0,
            [_refunded("evt_1", total=2000, at=AFTER)],
            3,
            2000,
            ("CONTRADICTED", "entitlement_over_revoked", "wrong amount"),
        ),
        (
            "refund failed at Stripe",
            5,
            [
                _refunded("evt_1", total=5000, at=AFTER),
                _refunded("evt_2", total=0, at=AFTER + timedelta(seconds=1)),
            ],
            0,
            5000,
            ("CONTRADICTED", "refund_total_below_declared", "refund not completed"),
        ),
        ("no event yet", 0, [], 0, 5000, ("PENDING", "awaiting_evidence", None)),
        # Read before Stripe's event is in: the app may simply not have had it yet.
        ("stale seats before the event", 5, [], 0, 5000, ("PENDING", "awaiting_evidence", None)),
        ("fewer seats before the event", 0, [], 3, 2000, ("PENDING", "awaiting_evidence", None)),
        (
            "event from before the operation",
            0,
            [_refunded("evt_0", total=5000, at=T0 - timedelta(seconds=30))],
            0,
            5000,
            ("PENDING", "awaiting_evidence", None),
        ),
        (
            "event of another charge",
            0,
            [_refunded("evt_9", total=5000, at=AFTER, charge="ch_other")],
            0,
            5000,
            ("PENDING", "awaiting_evidence", None),
        ),
        (
            "app not read yet",
            None,
            [_refunded("evt_1", total=5000, at=AFTER)],
            0,
            5000,
            ("PENDING", "awaiting_evidence", None),
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_the_example_decides(
    case: str,
    seats: int | None,
    events: list[EventRecord],
    expected_seats: int,
    total: int,
    outcome: tuple[str, str, str | None],
) -> None:
    assert (
        _decide(seats=seats, events=events, expected_seats=expected_seats, total=total) == outcome
    )


def test_a_gated_condition_is_unknown_until_its_gate_holds() -> None:
    contract = _example()
    now = T0 + timedelta(seconds=5)
    value = {"charge": CHARGE, "seats": 5}
    reading = [Observation("entitlement_readback", now, ObservationStatus.OK, value)]
    decision = decide(contract, _facts(), reading, now)
    stale = next(c for c in decision.conditions if c.id == "entitlement_not_revoked")
    assert (stale.holds, stale.note) == (None, "awaiting_gate")
    assert decision.final is False


@pytest.mark.parametrize(
    ("gate", "field", "message"),
    [
        (
            {"path": "$observed.nowhere.count", "op": "gte", "value": 1},
            "negative[1].when[0].path",
            "$observed.nowhere.count: channel nowhere is not declared",
        ),
        (
            {"path": "$observed.charge_refunded_events.count", "op": "in", "value": 1},
            "negative[1].when[0].value",
            "in takes a list of values",
        ),
        (
            {"path": "$event.type", "op": "eq", "value": "charge.refunded"},
            "negative[1].when[0].path",
            "$event.type: $event is only valid inside a webhook channel's match rules",
        ),
    ],
)
def test_lint_checks_gates(gate: dict[str, Any], field: str, message: str) -> None:
    data = load_yaml(ENTITLEMENT)
    data["negative"][1]["when"] = [gate]
    _, errors = validate_contract(data, file="x.yaml")
    assert (field, message) in [(e.field, e.message) for e in errors]


def test_contracts_without_gates_keep_their_hash() -> None:
    contract = Contract.model_validate(contract_data(SUCCEEDED))
    assert all("when" not in n for n in contract.document()["negative"])
    assert all("when" not in r for r in contract.document()["verdict_map"])
    gated = load_yaml(ENTITLEMENT)
    parsed = Contract.model_validate(gated)
    assert parsed.document()["negative"][1]["when"] == [
        {"path": "$observed.charge_refunded_events.count", "op": "gte", "value": 1}
    ]
