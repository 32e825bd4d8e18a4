"""Every ``provely sandbox trigger`` fixture makes the sandbox emit and deliver its event."""

from __future__ import annotations

from typing import Any

import pytest

from services.sandbox.runner import RunningSandbox
from services.sandbox.trigger import FIXTURES, TriggerError, trigger
from tests.sandbox.conftest import Receiver


@pytest.mark.parametrize("event", sorted(FIXTURES))
def test_each_fixture_emits_and_delivers_its_event(
    event: str, running: RunningSandbox, receiver: Receiver, endpoint: Any
) -> None:
    done = trigger(running.base_url, event, api_key=running.api_key)
    assert event in [kind for kind, _ in done.events]
    assert all(ident.startswith("evt_") for _, ident in done.events)
    assert done.objects
    delivered = {e["id"] for e in receiver.events()}
    assert {ident for kind, ident in done.events if kind == event} <= delivered


def test_an_unknown_event_type_is_refused(running: RunningSandbox) -> None:
    with pytest.raises(TriggerError, match=r"no fixture for 'invoice\.paid'"):
        trigger(running.base_url, "invoice.paid", api_key=running.api_key)
