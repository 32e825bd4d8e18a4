"""The :class:`Verifier` protocol and the registry of verifiers by name.

A verifier is described by what the rest of the system needs to know about it, never by its
name: every property below answers one question some module used to answer by comparing the
name with a string. The registry maps the ``verifier:`` of a channel to its verifier; a name no
verifier holds raises :class:`~shared.core.ChannelError` (a contract naming one does not load).
"""

from __future__ import annotations

from typing import Any, Protocol

from shared.core import ChannelError

__all__ = [
    "Verifier",
    "register",
    "registered",
    "unregister",
    "verifier_named",
    "verifier_of",
]


class Verifier(Protocol):
    """What a channel's verifier is, as the runtime, the lint and the engine see it."""

    @property
    def name(self) -> str:
        """The ``verifier:`` a contract writes."""

    @property
    def level(self) -> str:
        """The evidence level its channels observe at (E2, E3)."""

    @property
    def params(self) -> str:
        """The channel field that holds its parameters (a channel takes no other block)."""

    @property
    def polled(self) -> bool:
        """Read by the observer's readback task, on the contract's schedule and backoff."""

    @property
    def reduces_events(self) -> bool:
        """Its observation is a reduction of the provider events stored for the operation,
        made when the observations are stored (events that arrived meanwhile count)."""

    @property
    def brings_events(self) -> bool:
        """It brings the provider's events to the intake (so the provider's events may
        correlate with the contract's operations)."""

    @property
    def signed(self) -> bool:
        """Its evidence is the provider's signed word on its own (may supersede a VERIFIED)."""

    @property
    def monotone(self) -> bool:
        """It reads current state that a lagging read may show going backwards."""


_REGISTRY: dict[str, Verifier] = {}


def register(verifier: Verifier) -> None:
    """Make ``verifier`` the one for its name; a second verifier of one name is refused."""
    found = _REGISTRY.get(verifier.name)
    if found is not None and found is not verifier:
        raise ChannelError(f"a verifier named {verifier.name!r} is registered already")
    _REGISTRY[verifier.name] = verifier


def unregister(name: str) -> None:
    """Forget the verifier of ``name`` (tests that register a fake)."""
    _REGISTRY.pop(name, None)


def registered() -> tuple[str, ...]:
    """The names of the registered verifiers, sorted."""
    return tuple(sorted(_REGISTRY))


def verifier_named(name: str) -> Verifier:
    """The verifier of ``name``; raises ChannelError when no verifier holds the name."""
    found = _REGISTRY.get(name)
    if found is None:
        raise ChannelError(
            f"no verifier is named {name!r}; known: {', '.join(registered()) or 'none'}"
        )
    return found


def verifier_of(channel: Any) -> Verifier:
    """The verifier of a channel (anything with a ``verifier`` name)."""
    return verifier_named(str(channel.verifier))
