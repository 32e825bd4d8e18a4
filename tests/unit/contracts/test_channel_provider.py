"""Per-channel providers and the shipped seed-003 example (pure: no I/O beyond reading files).

A channel may name the provider it observes; without one it observes the contract's skill
provider, and a contract that names none serialises (and hashes) exactly as before the field
existed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shared.core.contract import Contract, canonical_json, contract_hash
from shared.core.lint import validate_contract
from shared.core.render import render_page
from shared.registry import load_registry
from shared.skills import load_trusted_keys, verify_skill
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
    from shared.registry import RegistryError

    copy = tmp_path / "examples"
    copy.mkdir()
    for path in EXAMPLES.iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    target = copy / ENTITLEMENT.name
    target.write_bytes(target.read_bytes().replace(b"max_attempts: 20", b"max_attempts: 21"))
    with pytest.raises(RegistryError) as exc:
        load_registry([copy], trusted_keys=_keys(), allow_unsigned=False)
    assert f"{target}: content differs from the sha256" in "\n".join(exc.value.problems)
