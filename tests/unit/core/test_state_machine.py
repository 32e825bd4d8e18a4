"""The operation lifecycle table: every pair of states, allowed or refused."""

from __future__ import annotations

import itertools

import pytest

from shared.core import IllegalTransition
from shared.core.state_machine import FINAL_STATES, TRANSITIONS, is_final, transition
from shared.core.types import OperationState

S = OperationState

ALLOWED = {
    (S.CREATED, S.ACTION_STARTED),
    (S.CREATED, S.ACTION_ACCEPTED),
    (S.CREATED, S.OBSERVING),
    (S.CREATED, S.FAILED),
    (S.CREATED, S.EXPIRED),
    (S.ACTION_STARTED, S.ACTION_ACCEPTED),
    (S.ACTION_STARTED, S.OBSERVING),
    (S.ACTION_STARTED, S.FAILED),
    (S.ACTION_STARTED, S.EXPIRED),
    (S.ACTION_ACCEPTED, S.OBSERVING),
    *(
        (source, target)
        for source in (S.OBSERVING, S.PENDING)
        for target in (
            S.OBSERVING,
            S.PENDING,
            S.VERIFIED,
            S.CONTRADICTED,
            S.FAILED,
            S.UNVERIFIABLE,
            S.HUMAN_REVIEW,
        )
    ),
    (S.UNVERIFIABLE, S.HUMAN_REVIEW),
    (S.VERIFIED, S.HUMAN_REVIEW),
    (S.CONTRADICTED, S.HUMAN_REVIEW),
    (S.FAILED, S.HUMAN_REVIEW),
}


@pytest.mark.parametrize(("source", "target"), list(itertools.product(S, S)))
def test_transition_table(source: OperationState, target: OperationState) -> None:
    if (source, target) in ALLOWED:
        assert transition(source, target) is target
    else:
        with pytest.raises(IllegalTransition) as raised:
            transition(source, target)
        assert raised.value.current == source.value
        assert raised.value.target == target.value
        assert f"{source.value} -> {target.value}" in str(raised.value)


def test_the_table_names_every_state() -> None:
    assert set(TRANSITIONS) == set(S)


def test_the_happy_path() -> None:
    state = S.CREATED
    for target in (S.ACTION_STARTED, S.ACTION_ACCEPTED, S.OBSERVING, S.PENDING, S.VERIFIED):
        state = transition(state, target)
    assert is_final(state)


@pytest.mark.parametrize("state", list(S))
def test_is_final(state: OperationState) -> None:
    expected = state in {
        S.VERIFIED,
        S.CONTRADICTED,
        S.FAILED,
        S.UNVERIFIABLE,
        S.EXPIRED,
        S.HUMAN_REVIEW,
    }
    assert is_final(state) is expected
    assert is_final(state.value) is expected
    assert (state in FINAL_STATES) is expected


def test_names_are_accepted_and_unknown_names_raise() -> None:
    assert transition("OBSERVING", "PENDING") is S.PENDING
    with pytest.raises(ValueError, match="NOPE"):
        transition("NOPE", "PENDING")
