"""The audit chain's hash split around ``seq``: the bytes the database completes are the bytes
``transition_hash`` hashes, whatever the row holds."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from shared.db.audit import GENESIS_HASH, hashed_around_seq, transition_hash

_text = st.text(max_size=20)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | _text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)


@st.composite
def rows(draw: st.DrawFn) -> dict[str, Any]:
    return {
        "workspace_id": draw(_text),
        "operation_id": draw(_text),
        "from_state": draw(st.none() | _text),
        "to_state": draw(_text),
        "verdict": draw(st.none() | _text),
        "reason": draw(st.none() | _text),
        "cause": draw(_text),
        # "seq" among the details' keys: only the row's own seq is left out.
        "details": draw(st.none() | st.dictionaries(st.sampled_from(["seq", "a", "z"]), _json)),
        "created_at": datetime(2026, 1, 1, tzinfo=UTC)
        + timedelta(microseconds=draw(st.integers(0, 10**15))),
    }


@given(row=rows(), seq=st.integers(1, 2**62), prev=st.sampled_from([GENESIS_HASH, "ab" * 32]))
def test_split_hash_is_the_row_hash(row: dict[str, Any], seq: int, prev: str) -> None:
    before, after = hashed_around_seq(row)
    completed = prev.encode("ascii") + before + str(seq).encode("ascii") + after
    assert hashlib.sha256(completed).hexdigest() == transition_hash(prev, {**row, "seq": seq})


def test_split_is_around_the_rows_own_seq() -> None:
    before, after = hashed_around_seq(
        {
            "workspace_id": "ws_a",
            "operation_id": "op_1",
            "from_state": None,
            "to_state": "PENDING",
            "verdict": None,
            "reason": "r",
            "cause": "test",
            "details": {"seq": 7},
            "created_at": datetime(2026, 11, 30, tzinfo=UTC),
        }
    )
    assert before.endswith(b'"reason":"r","seq":')
    assert b'"details":{"seq":7}' in before
    assert after == b',"to_state":"PENDING","verdict":null,"workspace_id":"ws_a"}'
