"""What the pages publish, read from the contract registry: skills, contracts and versions."""

from __future__ import annotations

import hashlib

from shared.core.published import PublishedContract, PublishedSkill
from shared.trust.registry import RegisteredContract, Registry, get_registry

__all__ = ["PageNotFound", "all_skills", "contract_versions", "find_skill", "registry_digest"]


class PageNotFound(LookupError):
    """No published page at this address."""


def _published(entry: RegisteredContract) -> PublishedContract:
    return PublishedContract(entry.contract, entry.hash, entry.certification)


def _registry() -> Registry:
    return get_registry()


def find_skill(provider: str) -> PublishedSkill:
    """The skill of ``provider`` with the newest version of each of its contracts."""
    registry = _registry()
    loaded = registry.skill(provider)
    if loaded is None:
        raise PageNotFound(f"no published skill for the provider {provider!r}")
    manifest = loaded.manifest
    newest: dict[str, PublishedContract] = {}
    for contract_id in registry.ids():
        entry = registry.entry(contract_id)
        if entry.contract.skill.provider == provider:
            newest[contract_id] = _published(entry)
    return PublishedSkill(
        provider=provider,
        title=manifest.title,
        version=manifest.version,
        certification=loaded.certification,
        key_id=loaded.key_id,
        signature_scheme=manifest.signature.scheme if manifest.signature else None,
        readback_paths=tuple(manifest.readback.paths or ()) if manifest.readback else (),
        contracts=tuple(newest[i] for i in sorted(newest)),
    )


def all_skills() -> list[PublishedSkill]:
    """Every provider's skill, by provider name."""
    providers = sorted({s.manifest.provider for s in _registry().skills()})
    return [find_skill(p) for p in providers]


def contract_versions(provider: str, contract_id: str) -> list[PublishedContract]:
    """Every version of one contract of ``provider``, oldest first."""
    registry = _registry()
    versions = registry.versions(contract_id) if contract_id in registry.ids() else []
    entries = [registry.entry(contract_id, v) for v in versions]
    if not entries or entries[0].contract.skill.provider != provider:
        raise PageNotFound(f"no published contract {contract_id!r} for {provider!r}")
    return [_published(e) for e in entries]


def registry_digest(*hashes: str) -> str:
    """A short stable digest of contract hashes: what a page's ETag is keyed on."""
    return hashlib.sha256("\n".join(hashes).encode()).hexdigest()[:32]
