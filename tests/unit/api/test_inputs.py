"""The input check of POST /v1/operations against a contract's declared and read inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from services.ingress.api.inputs import check_input, input_paths
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


def _with_currency_pattern(pattern: str) -> Contract:
    return refund(
        input={
            "charge": {"type": "string"},
            "amount": {"type": "integer"},
            "currency": {"type": "string", "pattern": pattern},
        }
    )


@pytest.mark.timeout(60)  # a backtracking engine would not finish this in any lifetime
@pytest.mark.parametrize("pattern", [r"^(a+)+$", r"^(a|a)*$", r"^(a|aa)+$", r"^(.*a){20}$"])
def test_a_hostile_pattern_is_matched_in_linear_time(pattern: str) -> None:
    """Patterns run on RE2: against 1,000 characters that almost match, ``re`` backtracks
    through 2^1000 ways; RE2 answers in one pass (timings: bench/hostile.py)."""
    contract = _with_currency_pattern(pattern)
    hostile = "a" * 1000 + "!"
    for _ in range(100):
        assert fields(contract, {"charge": "ch_1", "amount": 1, "currency": hostile}) == [
            "input.currency"
        ]
    assert fields(contract, {"charge": "ch_1", "amount": 1, "currency": "a" * 1000}) == []


def test_a_pattern_re2_cannot_compile_is_a_problem_of_the_field_not_an_error() -> None:
    """A contract stored before lint refused backreferences: the input is refused with a
    message that says why, never a server error."""
    contract = _with_currency_pattern(r"^([a-z])\1$")
    problems = check_input(contract, {"charge": "ch_1", "amount": 1, "currency": "aa"})
    assert [p.field for p in problems] == ["input.currency"]
    assert "does not compile with RE2" in problems[0].message
