"""A fake verifier for tests: traits of one's choosing under a name no contract ships."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FakeVerifier"]


@dataclass(frozen=True, slots=True)
class FakeVerifier:
    name: str = "fake"
    level: str = "E2"
    params: str = "http"
    polled: bool = True
    reduces_events: bool = False
    brings_events: bool = False
    signed: bool = False
    monotone: bool = False
