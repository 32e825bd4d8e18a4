"""The operation lifecycle as an explicit transition table.

This module owns which state may follow which. ``TRANSITIONS`` is the whole truth: a state
change it does not list raises ``IllegalTransition``. The same guard is repeated in SQL by the
persistence layer (``UPDATE … WHERE state IN (…)``).

Lifecycle: CREATED → ACTION_STARTED → ACTION_ACCEPTED → OBSERVING ⇄ PENDING → final.

- CREATED → ACTION_ACCEPTED is allowed too: an agent may report the result without having
  reported the start.
- CREATED / ACTION_STARTED → OBSERVING: an action that errored or timed out is still observed
  (it may have run); → FAILED when the provider rejected the action; → EXPIRED when no action
  was reported within the action window.
- OBSERVING and PENDING may repeat themselves (a new non-final verdict, same state).
- OBSERVING / PENDING → VERIFIED, CONTRADICTED, FAILED, UNVERIFIABLE, HUMAN_REVIEW.
- UNVERIFIABLE → HUMAN_REVIEW (a person takes the case over).
- VERIFIED / CONTRADICTED / FAILED → HUMAN_REVIEW: late contradicting evidence is appended
  and flags the operation; the final verdict itself is never rewritten.
- Nothing else leaves a final state; EXPIRED and HUMAN_REVIEW are terminal.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from shared.core import IllegalTransition
from shared.core.types import OperationState

__all__ = ["FINAL_STATES", "TRANSITIONS", "IllegalTransition", "is_final", "transition"]

S = OperationState

_VERDICT_STATES: Final = frozenset(
    {S.VERIFIED, S.CONTRADICTED, S.FAILED, S.UNVERIFIABLE, S.HUMAN_REVIEW}
)

TRANSITIONS: Final[Mapping[OperationState, frozenset[OperationState]]] = MappingProxyType(
    {
        S.CREATED: frozenset(
            {S.ACTION_STARTED, S.ACTION_ACCEPTED, S.OBSERVING, S.FAILED, S.EXPIRED}
        ),
        S.ACTION_STARTED: frozenset({S.ACTION_ACCEPTED, S.OBSERVING, S.FAILED, S.EXPIRED}),
        S.ACTION_ACCEPTED: frozenset({S.OBSERVING}),
        S.OBSERVING: frozenset({S.OBSERVING, S.PENDING}) | _VERDICT_STATES,
        S.PENDING: frozenset({S.OBSERVING, S.PENDING}) | _VERDICT_STATES,
        S.VERIFIED: frozenset({S.HUMAN_REVIEW}),
        S.CONTRADICTED: frozenset({S.HUMAN_REVIEW}),
        S.FAILED: frozenset({S.HUMAN_REVIEW}),
        S.UNVERIFIABLE: frozenset({S.HUMAN_REVIEW}),
        S.EXPIRED: frozenset(),
        S.HUMAN_REVIEW: frozenset(),
    }
)

FINAL_STATES: Final = frozenset(
    {S.VERIFIED, S.CONTRADICTED, S.FAILED, S.UNVERIFIABLE, S.EXPIRED, S.HUMAN_REVIEW}
)


def is_final(state: OperationState | str) -> bool:
    """True for a state whose verdict can no longer change."""
    return OperationState(state) in FINAL_STATES


def transition(current: OperationState | str, target: OperationState | str) -> OperationState:
    """Return ``target`` when the table allows ``current → target``, else raise
    ``IllegalTransition``. Unknown state names raise ``ValueError``."""
    source = OperationState(current)
    destination = OperationState(target)
    if destination not in TRANSITIONS[source]:
        raise IllegalTransition(source.value, destination.value)
    return destination
