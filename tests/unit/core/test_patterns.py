"""Contract patterns on RE2 (shared.core.patterns): linear matching, clear refusals."""

from __future__ import annotations

import pytest

from shared.core.patterns import PatternError, compile_pattern, pattern_matches


@pytest.mark.parametrize(
    ("pattern", "value", "expected"),
    [
        ("^[a-z]{3}$", "usd", True),
        ("^[a-z]{3}$", "USD", False),
        ("^ch_[A-Za-z0-9_]+$", "ch_123", True),
        ("[0-9]", "abc1", True),  # search semantics, as re.search
        ("^(a+)+$", "a" * 1000 + "!", False),
        ("^(a+)+$", "a" * 1000, True),
        ("^é+$", "ééé", True),
    ],
)
def test_patterns_match_as_search(pattern: str, value: str, expected: bool) -> None:
    assert pattern_matches(pattern, value) is expected


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (r"(a)\1", "invalid escape sequence"),
        ("(?=a)", "invalid perl operator"),
        ("([a-z", "missing ]"),
        ("\ud800", "surrogates"),
    ],
)
def test_what_re2_cannot_compile_is_a_pattern_error(pattern: str, reason: str) -> None:
    with pytest.raises(PatternError, match=reason.replace("]", r"\]")):
        compile_pattern(pattern)
    with pytest.raises(PatternError):
        pattern_matches(pattern, "a")


def test_a_value_that_is_not_unicode_does_not_match() -> None:
    assert pattern_matches("a", "a\ud800") is False
