"""Shared helpers of the contract tests: the repository root, the shipped files, a CLI runner."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[3]
CONTRACTS = REPO_ROOT / "contracts"
STRIPE = CONTRACTS / "stripe"
SUCCEEDED = STRIPE / "refund.succeeded.yaml"
CREATED = STRIPE / "refund.created.yaml"
SUCCEEDED_1_1 = STRIPE / "refund.succeeded.v1.1.0.yaml"
CREATED_1_1 = STRIPE / "refund.created.v1.1.0.yaml"
"""1.1.0 adds the readback of the charge's refunds (``charge_refunds``) to 1.0.0's rows."""
SUCCEEDED_1_2 = STRIPE / "refund.succeeded.v1.2.0.yaml"
CREATED_1_2 = STRIPE / "refund.created.v1.2.0.yaml"
"""1.2.0 adds the refund's failure events and the readbacks' monotone rules to 1.1.0's rows."""
SUCCEEDED_1_3 = STRIPE / "refund.succeeded.v1.3.0.yaml"
"""1.3.0 adds the event log (``refund_event_log``) to 1.2.0's rows."""


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def shipped_files(skill: Path = STRIPE) -> dict[str, dict[str, Path]]:
    """Every contract file of a shipped skill's directory, by contract id and version (what
    a release ships, read from the files: a new version needs no edit of the tests)."""
    found: dict[str, dict[str, Path]] = {}
    for path in sorted(skill.glob("*.yaml")):
        if path.name == "skill.yaml":
            continue
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        found.setdefault(doc["id"], {})[doc["version"]] = path
    return {
        cid: dict(sorted(versions.items(), key=lambda kv: _version_key(kv[0])))
        for cid, versions in found.items()
    }


def shipped_versions(contract_id: str, skill: Path = STRIPE) -> list[str]:
    """The shipped versions of a contract, oldest first."""
    return list(shipped_files(skill)[contract_id])


def newest_file(contract_id: str, skill: Path = STRIPE) -> Path:
    """The file of the newest shipped version of a contract."""
    return list(shipped_files(skill)[contract_id].values())[-1]


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


_CACHE: dict[Path, Any] = {}


def contract_data(path: Path = SUCCEEDED) -> Any:
    """A fresh, mutable copy of a shipped contract document."""
    if path not in _CACHE:
        _CACHE[path] = load_yaml(path)
    return copy.deepcopy(_CACHE[path])
