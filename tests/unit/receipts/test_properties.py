"""Properties over generated receipts: whatever JSON the conditions observed, a signed receipt
survives a storage round trip, and changing any one leaf is caught."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from shared.core.receipt import receipt_document
from shared.core.types import ConditionResult
from shared.lifecycle.receipt_check import Verification, verify_receipt_document
from tests.unit.receipts.factory import changed, get_at, leaves, sample_body, set_at
from tests.unit.receipts.test_signing import RING, signed

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
values = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
conditions = st.lists(
    st.builds(
        ConditionResult,
        id=st.text(min_size=1, max_size=12),
        kind=st.sampled_from(["completion", "negative", "verdict_map"]),
        holds=st.none() | st.booleans(),
        observed=values,
        expected=values,
    ),
    max_size=4,
)


def _check(document: dict[str, Any]) -> Verification:
    return verify_receipt_document(json.dumps(document), RING).status


@settings(max_examples=60, deadline=None)
@given(found=conditions, reason=st.text(max_size=30), data=st.data())
def test_any_receipt_round_trips_and_any_leaf_change_is_caught(
    found: list[ConditionResult], reason: str, data: st.DataObject
) -> None:
    body = sample_body(conditions=found, reason=reason)
    document = signed(body)
    # Stored as JSON and read back (as the database does), the document still verifies.
    stored = json.loads(json.dumps(document))
    assert _check(stored) is Verification.VALID
    paths = leaves(stored["receipt"])
    path = data.draw(st.sampled_from(paths))
    altered = copy.deepcopy(stored)
    old = get_at(altered["receipt"], path)
    new = changed(path, old)
    if new == old or (isinstance(new, float) and float(new) == old):
        return  # a float too large for the flip to change it
    set_at(altered["receipt"], path, new)
    assert _check(altered) is Verification.TAMPERED, path
    assert receipt_document(stored["receipt"], signature="x", key_id="y")["alg"] == "Ed25519"
