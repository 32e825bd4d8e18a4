"""The refund contract the scenarios run: its name, the standard version, and the short-timing
copy whose deadline is seconds, signed into a demo skill with a key generated for the run."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "REFUND_CONTRACT",
    "SHORT_TIMING",
    "SHORT_VERSION",
    "STANDARD_VERSION",
    "write_short_timing_skill",
]

REFUND_CONTRACT = "stripe.refund.succeeded"
STANDARD_VERSION = "1.1.0"
SHORT_VERSION = "1.0.1"
"""The short-timing copy of 1.0.0: its rules, a deadline of seconds instead of seven days."""

SHORT_TIMING: dict[str, Any] = {
    "initial_delay_ms": 500,
    "poll_interval_ms": 1000,
    "backoff": {"kind": "exponential", "factor": 2, "max_ms": 2000},
    "max_attempts": 6,
    "timeout_ms": 6000,
}


def write_short_timing_skill(
    directory: Path,
    *,
    version: str = SHORT_VERSION,
    timing: Mapping[str, Any] = SHORT_TIMING,
) -> dict[str, str]:
    """Write a signed skill holding ``stripe.refund.succeeded`` at :data:`SHORT_VERSION` with a
    deadline of seconds (or at ``version`` with ``timing`` merged over the contract's own);
    returns the environment that makes a Provely process load it."""
    import yaml

    from shared.trust.registry import SHIPPED_CONTRACTS_DIR
    from shared.trust.skills import generate_private_key, public_key_pem, sign_skill

    source_dir = SHIPPED_CONTRACTS_DIR / "stripe"
    skill_dir = directory / "contracts" / "stripe-demo"
    skill_dir.mkdir(parents=True, exist_ok=True)
    contract = yaml.safe_load((source_dir / "refund.succeeded.yaml").read_text("utf-8"))
    contract["version"] = version
    contract["title"] = str(contract.get("title", "")) + " (demo copy with a short deadline)"
    contract["timing"] = {**contract["timing"], **timing}
    contract_file = "refund.succeeded.short.yaml"
    (skill_dir / contract_file).write_text(
        yaml.safe_dump(contract, sort_keys=False, allow_unicode=True), "utf-8"
    )
    manifest = yaml.safe_load((source_dir / "skill.yaml").read_text("utf-8"))
    manifest["contracts"] = [{"file": contract_file, "sha256": "0" * 64}]
    (skill_dir / "skill.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False), "utf-8")
    key = generate_private_key()
    sign_skill(skill_dir, key)
    keys_dir = directory / "keys"
    keys_dir.mkdir(parents=True, exist_ok=True)
    public_file = keys_dir / "demo-publisher.pub"
    public_file.write_bytes(public_key_pem(key.public_key()))
    return {
        "PROVELY_CONTRACT_PATHS": str(skill_dir.parent),
        "PROVELY_TRUSTED_PUBLISHER_KEYS": str(public_file),
    }
