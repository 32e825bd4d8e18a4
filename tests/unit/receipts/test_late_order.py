"""Is contradicting evidence newer than the evidence behind a receipt? Channel by channel;
provider time first, then reading time; clocks of different channels are never compared."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from shared.core.types import Decision, EvidenceUsed, Verdict
from shared.lifecycle.late_evidence import _is_newer

T = datetime(2026, 11, 30, 7, 0, tzinfo=UTC)


def iso(t: datetime | None) -> str | None:
    return None if t is None else t.isoformat().replace("+00:00", "Z")


def receipt(*entries: tuple[str, datetime | None, datetime | None]) -> dict[str, Any]:
    return {
        "valid_as_of": iso(T),
        "evidence": [
            {"channel": c, "observed_at": iso(seen), "provider_timestamp": iso(provider)}
            for c, seen, provider in entries
        ],
    }


def failed(*entries: tuple[str, datetime | None, datetime | None]) -> Decision:
    return Decision(
        verdict=Verdict.FAILED,
        reason="terminal_failure",
        class_=None,
        final=True,
        conditions=(),
        evidence=tuple(
            EvidenceUsed(c, "E2", "ok", seen, provider, "d", True, True)
            for c, seen, provider in entries
        ),
    )


S = timedelta(seconds=1)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        # A later readback of the same refund: newer (Date header, then reading time).
        ([("readback", T, T)], [("readback", T + 60 * S, T + 60 * S)], True),
        ([("readback", T, None)], [("readback", T + 60 * S, None)], True),
        ([("readback", T, T)], [("readback", T + 60 * S, T)], True),  # same second: read later
        # An earlier state delivered late: older provider time contradicts nothing.
        ([("readback", T, T)], [("readback", T + 60 * S, T - 5 * S)], False),
        ([("readback", T, None)], [("readback", T - S, None)], False),
        # Event clocks (the provider's, possibly ahead) are not compared with a readback's.
        (
            [("readback", T, T), ("events", T + S, T + 600 * S)],
            [("readback", T + 60 * S, T + 60 * S)],
            True,
        ),
        # A channel the receipt did not cite: its reading time against valid_as_of.
        ([("readback", T, T)], [("other", T + S, None)], True),
        ([("readback", T, T)], [("other", T - S, None)], False),
        # Nothing comparable: not newer.
        ([("readback", None, None)], [("readback", None, None)], False),
    ],
)
def test_order(
    old: list[tuple[str, datetime | None, datetime | None]],
    new: list[tuple[str, datetime | None, datetime | None]],
    expected: bool,
) -> None:
    assert _is_newer(failed(*new), receipt(*old)) is expected
