"""The input check of POST /v1/operations against a contract's declared and read inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from services.ingress.inputs import check_input, input_paths
from shared.core.contract import Contract

ROOT = Path(__file__).resolve().parents[3]


def refund(**changes: Any) -> Contract:
    doc = yaml.safe_load((ROOT / "contracts/stripe/refund.succeeded.yaml").read_text("utf-8"))
    doc.update(changes)
    return Contract.model_validate(doc)


def fields(contract: Contract, data: dict[str, Any]) -> list[str]:
    return [p.field for p in check_input(contract, data)]


def test_the_refund_contract_reads_its_declared_inputs() -> None:
    assert set(input_paths(refund())) == {"charge", "amount", "currency"}


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"charge": "ch_1", "amount": 1, "currency": "eur"}, []),
        ({"charge": "ch_1", "amount": 1, "currency": "eur", "extra": [1]}, []),
        ({}, ["input.charge", "input.amount", "input.currency"]),
        ({"charge": 5, "amount": 1, "currency": "eur"}, ["input.charge"]),
        ({"charge": "ch_1", "amount": 1.5, "currency": "eur"}, ["input.amount"]),
        ({"charge": "ch_1", "amount": False, "currency": "eur"}, ["input.amount"]),
        ({"charge": "ch_1", "amount": 0, "currency": "eur"}, ["input.amount"]),
        ({"charge": "ch_1", "amount": 1, "currency": "euro"}, ["input.currency"]),
    ],
)
def test_declared_fields(data: dict[str, Any], expected: list[str]) -> None:
    assert fields(refund(), data) == expected


def test_an_undeclared_path_the_contract_reads_is_required() -> None:
    contract = refund(
        input={"charge": {"type": "string"}, "amount": {"type": "integer"}},
    )
    # currency is no longer declared but the conditions still read $input.currency.
    assert fields(contract, {"charge": "ch_1", "amount": 1}) == ["input.currency"]
    assert fields(contract, {"charge": "ch_1", "amount": 1, "currency": None}) == []


def test_an_optional_declared_field_may_be_absent_but_not_mistyped() -> None:
    contract = refund(
        input={
            "charge": {"type": "string"},
            "amount": {"type": "integer"},
            "currency": {"type": "string", "required": False},
        }
    )
    assert fields(contract, {"charge": "ch_1", "amount": 1}) == []
    assert fields(contract, {"charge": "ch_1", "amount": 1, "currency": 3}) == ["input.currency"]
