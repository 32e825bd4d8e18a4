"""Every scenario by name, in the order the demo shows them: the refund traps, then the
entitlement scenario."""

from __future__ import annotations

from services.cli.demo.scenarios.entitlement import ENTITLEMENT
from services.cli.demo.scenarios.refunds import REFUNDS
from services.cli.demo.scenarios.scenario import Scenario

__all__ = ["SCENARIOS", "scenario_names"]

SCENARIOS: dict[str, Scenario] = {s.name: s for s in (*REFUNDS, ENTITLEMENT)}


def scenario_names() -> list[str]:
    return list(SCENARIOS)
