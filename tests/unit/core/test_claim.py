"""Claims follow the completion level (safety rule 2), the same in every view: the operation
resource and the receipt take ``safe_to_claim_complete`` from the same rule."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import yaml

from shared.core.claim import claim_for
from shared.core.contract import Contract, contract_hash
from shared.core.receipt import (
    INTERMEDIATE_COMPLETION_LEVELS,
    ReceiptContract,
    build_receipt_body,
)
from shared.core.types import OperationState, Verdict
from tests.unit.core.builders import ROOT, T0

SHIPPED = sorted(path for path in (ROOT / "contracts").rglob("*.yaml") if path.name != "skill.yaml")
STATES = [s.value for s in OperationState]
VERDICTS = [None, *(v.value for v in Verdict)]


def _contract(path: Path) -> Contract:
    return Contract.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))


def test_every_shipped_contract_is_walked() -> None:
    levels = {_contract(p).completion_level for p in SHIPPED}
    assert {"created", "succeeded"} <= levels
    assert len(SHIPPED) >= 5


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_only_a_verified_terminal_level_may_claim_completion(path: Path) -> None:
    contract = _contract(path)
    terminal = contract.completion_level not in INTERMEDIATE_COMPLETION_LEVELS
    for state in STATES:
        for verdict in VERDICTS:
            claim = claim_for(
                state=state,
                verdict=verdict,
                completion_level=contract.completion_level,
                title=contract.title,
            )
            verified = state == "VERIFIED" and verdict == "VERIFIED"
            assert claim.safe_to_claim_complete is (verified and terminal), (state, verdict)
            assert claim.completion_level == contract.completion_level
            if verified:
                assert contract.title in claim.statement
                assert ("not the effect itself" in claim.statement) is not terminal
            else:
                assert claim.statement.startswith("Nothing may be claimed yet")
    reviewed = claim_for(
        state="HUMAN_REVIEW",
        verdict="CONTRADICTED",
        completion_level=contract.completion_level,
        title=contract.title,
        reviewed_verdict="VERIFIED",
    )
    assert reviewed.safe_to_claim_complete is terminal


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_the_receipt_and_the_resource_agree(path: Path) -> None:
    contract = _contract(path)
    for verdict in ("VERIFIED", "FAILED", "CONTRADICTED", "UNVERIFIABLE", "EXPIRED"):
        body = build_receipt_body(
            receipt_id="rcpt_1",
            operation_id="op_1",
            workspace_id="ws_1",
            contract=ReceiptContract(
                contract.id, contract.version, contract_hash(contract), contract.completion_level
            ),
            verdict=verdict,
            reason="r",
            class_=None,
            decided_at=T0,
            valid_as_of=T0,
            subject={},
            correlation=[],
            conditions=[],
            evidence=[],
            watch_until=T0 + timedelta(days=3) if verdict == "VERIFIED" else None,
        )
        claim = claim_for(
            state=verdict,
            verdict=verdict,
            completion_level=contract.completion_level,
            title=contract.title,
        )
        assert body["safe_to_claim_complete"] is claim.safe_to_claim_complete, verdict
        assert body["contract"]["completion_level"] == claim.completion_level
