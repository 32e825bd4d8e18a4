"""An operation's contract is loaded once per (workspace, contract, version, custom row, hash)
and kept for the 256 keys used last; a load that fails keeps nothing."""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from shared.lifecycle import contract_cache
from shared.lifecycle.contract_cache import cached_contract_for, clear_contract_cache


def _op(n: int) -> Any:
    return SimpleNamespace(
        workspace_id="ws_a",
        contract_id="stripe.refund.succeeded",
        contract_version="1.0.0",
        custom_contract_id=None,
        contract_hash=f"h{n}",
    )


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The contract hashes ``contract_for`` was asked to load; a hash ``bad`` raises."""
    loaded: list[str] = []

    def load(_session: Any, op: Any) -> Any:
        loaded.append(op.contract_hash)
        if op.contract_hash == "bad":
            raise LookupError(op.contract_hash)
        return ("contract", op.contract_hash)

    monkeypatch.setattr(contract_cache, "contract_for", load)
    clear_contract_cache()
    yield loaded
    clear_contract_cache()


def test_a_contract_is_loaded_once_per_key(loads: list[str]) -> None:
    session: Any = object()
    assert cached_contract_for(session, _op(1)) == ("contract", "h1")
    assert cached_contract_for(session, _op(1)) == ("contract", "h1")
    assert cached_contract_for(session, _op(2)) == ("contract", "h2")
    assert loads == ["h1", "h2"]


def test_the_contract_used_longest_ago_goes_first(loads: list[str]) -> None:
    session: Any = object()
    for n in range(256):
        cached_contract_for(session, _op(n))
    cached_contract_for(session, _op(0))  # used again: now the most recent
    cached_contract_for(session, _op(256))  # one too many: h1 goes
    loads.clear()
    cached_contract_for(session, _op(0))
    cached_contract_for(session, _op(2))
    assert loads == []
    cached_contract_for(session, _op(1))
    assert loads == ["h1"]


def test_a_failed_load_keeps_nothing(loads: list[str]) -> None:
    session: Any = object()
    bad = SimpleNamespace(**{**vars(_op(0)), "contract_hash": "bad"})
    for _ in range(2):
        with pytest.raises(LookupError):
            cached_contract_for(session, bad)
    assert loads == ["bad", "bad"]


def test_cleared_contracts_are_loaded_again(loads: list[str]) -> None:
    session: Any = object()
    cached_contract_for(session, _op(1))
    clear_contract_cache()
    cached_contract_for(session, _op(1))
    assert loads == ["h1", "h1"]
