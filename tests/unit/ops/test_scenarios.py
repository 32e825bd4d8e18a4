"""The demo's scenario table and its short-timing contract (no system needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.cli.demo.scenarios.catalog import SCENARIOS
from services.cli.demo.scenarios.refund_contract import (
    SHORT_TIMING,
    SHORT_VERSION,
    STANDARD_VERSION,
    write_short_timing_skill,
)
from services.cli.demo.scenarios.scenario import Expected, Outcome, explain
from shared.runtime.settings import Settings
from shared.trust.registry import RegistryError, load_registry
from tests.unit.contracts.helpers import shipped_versions


def test_every_trap_of_the_issue_has_a_scenario() -> None:
    assert set(SCENARIOS) == {
        "refund",
        "duplicate_refund",
        "wrong_amount",
        "failed",
        "canceled",
        "requires_action",
        "stuck_pending",
        "provider_outage",
        "timeout_before_write",
        "timeout_after_write",
        "entitlement",
    }
    # Only PENDING may be expected open; every other expectation is a final verdict.
    for s in SCENARIOS.values():
        assert s.expected.final == (s.expected.verdict != "PENDING"), s.name
        # A timeout is never FAILED: the deadline gives UNVERIFIABLE and a person decides.
        if s.short_timing:
            assert s.expected == Expected(
                "UNVERIFIABLE", "evidence_unavailable_before_timeout", "HUMAN_REVIEW"
            )


def test_short_timing_contract_is_signed_and_loads_beside_the_shipped_one(
    tmp_path: Path,
) -> None:
    env = write_short_timing_skill(tmp_path)
    settings = Settings(
        contract_paths=env["PROVELY_CONTRACT_PATHS"],
        trusted_publisher_keys=env["PROVELY_TRUSTED_PUBLISHER_KEYS"],
        allow_unsigned_skills=False,
    )
    registry = load_registry(settings=settings)
    # The demo pins 1.1.0 and a short copy of 1.0.0; the shipped versions load beside them.
    shipped = shipped_versions("stripe.refund.succeeded")
    assert registry.versions("stripe.refund.succeeded") == [
        shipped[0],
        SHORT_VERSION,
        *shipped[1:],
    ]
    assert STANDARD_VERSION == "1.1.0"
    short = registry.entry("stripe.refund.succeeded", SHORT_VERSION)
    assert short.signed
    assert short.contract.timing.timeout_ms == SHORT_TIMING["timeout_ms"]
    standard = registry.get("stripe.refund.succeeded", "1.0.0")
    # The rules of 1.0.0, only the timing differs.
    assert short.contract.completion == standard.completion
    assert short.contract.negative == standard.negative
    assert short.contract.verdict_map == standard.verdict_map


def test_short_timing_contract_is_refused_without_its_key(tmp_path: Path) -> None:
    env = write_short_timing_skill(tmp_path)
    settings = Settings(contract_paths=env["PROVELY_CONTRACT_PATHS"], allow_unsigned_skills=False)
    with pytest.raises(RegistryError):
        load_registry(settings=settings)


def test_why_names_the_deciding_condition_with_what_was_observed() -> None:
    op = {
        "id": "op_1",
        "verdict": "CONTRADICTED",
        "reason": "refund_amount_mismatch",
        "conditions": [
            {"id": "refund_amount_mismatch", "kind": "negative", "observed": 1500, "expected": 2000}
        ],
    }
    assert explain(op) == "refund_amount_mismatch: observed 1500, expected negative 2000"
    outcome = Outcome("x", ok=True, expected=Expected("VERIFIED", "r", "VERIFIED"), operation=op)
    outcome.others = [{"id": "op_2", "verdict": "VERIFIED", "reason": "all", "conditions": []}]
    assert outcome.why.endswith("; and VERIFIED for op_2: all")
