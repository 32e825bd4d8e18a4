"""The contract registry: every contract the runtime may use, loaded once, checked at load.

Contracts come from the shipped ``contracts/`` directory (package data of an installed wheel,
``shared/trust/shipped``; the checkout's ``contracts/`` in an editable install) and from every
directory in ``PROVELY_CONTRACT_PATHS``. A directory holding ``skill.yaml`` is a skill: its
listed contract files must match the sha256 recorded in the manifest and the manifest's
signature must verify with a trusted publisher key (the settings' ``trusted_publisher_keys``
plus the project's keys in ``contracts/keys/``). A contract file outside any skill is unsigned.

Refused at load, with a message naming the file (:class:`RegistryError` lists them all):
a tampered or unsigned skill, an unsigned contract file, a contract that does not lint, and two
files with the same id and version but different content. With ``allow_unsigned`` (the
operator's explicit choice, ``PROVELY_ALLOW_UNSIGNED_SKILLS=true``) unsigned and tampered skills
load, and their contracts show certification ``unsigned``.

Several versions of one contract live side by side: ``get(id)`` gives the newest by semantic
version, ``get(id, version)`` an exact one, ``by_hash(h)`` the one an operation was bound to.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from shared.core.contract import Contract, contract_hash
from shared.core.lint.document import validate_contract
from shared.core.lint.skill import lint_skill_manifest
from shared.core.skill import SkillManifest
from shared.runtime.settings import Settings, get_settings
from shared.trust.skills import (
    MANIFEST_FILE,
    SkillError,
    load_trusted_keys,
    verify_skill,
)

__all__ = [
    "CONTRACT_SUFFIXES",
    "SHIPPED_CONTRACTS_DIR",
    "SHIPPED_KEYS_DIR",
    "ContractNotFoundError",
    "LoadedSkill",
    "RegisteredContract",
    "Registry",
    "RegistryError",
    "get_registry",
    "load_registry",
    "parse_document",
]


def _shipped_contracts_dir() -> Path:
    """Where the shipped skills are: inside the installed package (the wheel carries them as
    ``shared/trust/shipped``), else the checkout's ``contracts/`` (an editable install)."""
    packaged = Path(__file__).resolve().parent / "shipped"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "contracts"


SHIPPED_CONTRACTS_DIR = _shipped_contracts_dir()
SHIPPED_KEYS_DIR = SHIPPED_CONTRACTS_DIR / "keys"
CONTRACT_SUFFIXES = (".yaml", ".yml", ".json")
UNSIGNED = "unsigned"


class RegistryError(Exception):
    """Contracts could not be loaded; ``problems`` holds one line per problem, naming the file."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


class ContractNotFoundError(RegistryError, LookupError):
    """No contract with that id (or that version of it)."""

    def __init__(self, message: str) -> None:
        super().__init__([message])


@dataclass(frozen=True)
class LoadedSkill:
    manifest: SkillManifest
    directory: Path
    signed: bool
    key_id: str | None

    @property
    def certification(self) -> str:
        return self.manifest.certification if self.signed else UNSIGNED


@dataclass(frozen=True)
class RegisteredContract:
    """A loaded contract with its hash, its file, and the certification it is shown with."""

    contract: Contract
    hash: str
    path: Path
    certification: str
    skill: LoadedSkill | None

    @property
    def signed(self) -> bool:
        return self.certification != UNSIGNED

    def skill_title(self) -> str | None:
        return self.skill.manifest.title if self.skill is not None else None


class Registry:
    """An immutable set of loaded contracts, by id and version."""

    def __init__(
        self, entries: Iterable[RegisteredContract], skills: Iterable[LoadedSkill] = ()
    ) -> None:
        self._by_id: dict[str, dict[str, RegisteredContract]] = {}
        self._by_hash: dict[str, RegisteredContract] = {}
        for entry in entries:
            c = entry.contract
            self._by_id.setdefault(c.id, {})[c.version] = entry
            self._by_hash.setdefault(entry.hash, entry)
        self._skills = tuple(skills)

    def ids(self) -> list[str]:
        return sorted(self._by_id)

    def versions(self, contract_id: str) -> list[str]:
        """Loaded versions of a contract, oldest first (semantic order)."""
        found = self._by_id.get(contract_id, {})
        return [e.contract.version for e in sorted(found.values(), key=_version_key)]

    def entries(self) -> list[RegisteredContract]:
        return [
            e for cid in self.ids() for e in sorted(self._by_id[cid].values(), key=_version_key)
        ]

    def entry(self, contract_id: str, version: str | None = None) -> RegisteredContract:
        found = self._by_id.get(contract_id)
        if not found:
            raise ContractNotFoundError(f"unknown contract {contract_id}")
        if version is None:
            return max(found.values(), key=_version_key)
        if version not in found:
            known = ", ".join(self.versions(contract_id))
            raise ContractNotFoundError(
                f"contract {contract_id} has no version {version} (loaded: {known})"
            )
        return found[version]

    def get(self, contract_id: str, version: str | None = None) -> Contract:
        """The contract; the newest version unless one is given."""
        return self.entry(contract_id, version).contract

    def by_hash(self, digest: str) -> RegisteredContract | None:
        return self._by_hash.get(digest)

    def skills(self) -> list[LoadedSkill]:
        return list(self._skills)

    def skill(self, provider: str) -> LoadedSkill | None:
        matches = [s for s in self._skills if s.manifest.provider == provider]
        if not matches:
            return None
        return max(matches, key=lambda s: _semver(s.manifest.version))

    def __len__(self) -> int:
        return sum(len(v) for v in self._by_id.values())


def _semver(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _version_key(entry: RegisteredContract) -> tuple[int, int, int]:
    return entry.contract.version_key


# --------------------------------------------------------------------------- loading


def parse_document(path: Path) -> Any:
    """Parse one YAML or JSON file; raises ``ValueError`` with the file and position."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read: {exc}") from exc
    if path.suffix == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not valid JSON: line {exc.lineno}: {exc.msg}") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ValueError(f"{path}: not valid YAML: {where}{problem}") from exc


def _candidate_files(root: Path) -> list[Path]:
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and p.suffix in CONTRACT_SUFFIXES
        and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


class _Loader:
    def __init__(self, keys: dict[str, Ed25519PublicKey], allow_unsigned: bool) -> None:
        self.keys = keys
        self.allow_unsigned = allow_unsigned
        self.problems: list[str] = []
        self.entries: dict[tuple[str, str], RegisteredContract] = {}
        self.skills: list[LoadedSkill] = []

    def load_root(self, root: Path) -> None:
        if not root.is_dir():
            self.problems.append(f"{root}: contract directory does not exist")
            return
        files = _candidate_files(root)
        skill_dirs = sorted({p.parent for p in files if p.name == MANIFEST_FILE})
        claimed: set[Path] = set()
        for directory in skill_dirs:
            claimed.add((directory / MANIFEST_FILE).resolve())
            claimed.update(self._load_skill(directory))
        for path in files:
            if path.resolve() in claimed:
                continue
            if not self.allow_unsigned:
                self.problems.append(
                    f"{path}: not listed in a signed skill manifest; sign it into a skill "
                    "or set PROVELY_ALLOW_UNSIGNED_SKILLS=true to load it as unsigned"
                )
                continue
            self._load_contract(path, skill=None)

    def _load_skill(self, directory: Path) -> set[Path]:
        try:
            check = verify_skill(directory, self.keys)
        except SkillError as exc:
            self.problems.extend(str(exc).splitlines())
            return set()
        signed = check.ok
        if not signed and not self.allow_unsigned:
            self.problems.extend(check.problems)
            return {(directory / e.file).resolve() for e in check.manifest.contracts}
        skill = LoadedSkill(check.manifest, directory, signed=signed, key_id=check.key_id)
        self.skills.append(skill)
        contracts: dict[str, Contract] = {}
        claimed: set[Path] = set()
        for entry in check.manifest.contracts:
            path = directory / entry.file
            claimed.add(path.resolve())
            if path.is_file():
                loaded = self._load_contract(path, skill=skill)
                if loaded is not None:
                    contracts[entry.file] = loaded
        data = check.manifest.document()
        for err in lint_skill_manifest(data, file=str(check.manifest_path), contracts=contracts):
            if err.field.endswith(".sha256") and not signed:
                continue  # already reported by the signature check; allowed as unsigned
            self.problems.append(str(err))
        return claimed

    def _load_contract(self, path: Path, *, skill: LoadedSkill | None) -> Contract | None:
        try:
            data = parse_document(path)
        except ValueError as exc:
            self.problems.append(str(exc))
            return None
        contract, errors = validate_contract(data, file=str(path))
        if contract is None:
            self.problems.extend(str(e) for e in errors)
            return None
        digest = contract_hash(contract)
        signed = skill is not None and skill.signed
        entry = RegisteredContract(
            contract=contract,
            hash=digest,
            path=path,
            certification=contract.certification if signed else UNSIGNED,
            skill=skill,
        )
        key = (contract.id, contract.version)
        previous = self.entries.get(key)
        if previous is None:
            self.entries[key] = entry
        elif previous.hash != digest:
            self.problems.append(
                f"{path}: {contract.id} {contract.version} conflicts with {previous.path}: "
                "same id and version, different content (give one a new version)"
            )
        return contract


def load_registry(
    dirs: Sequence[Path] | None = None,
    *,
    trusted_keys: dict[str, Ed25519PublicKey] | None = None,
    allow_unsigned: bool | None = None,
    settings: Settings | None = None,
) -> Registry:
    """Load and check every contract; raise :class:`RegistryError` naming each bad file.

    Defaults come from the settings: the shipped directory plus ``PROVELY_CONTRACT_PATHS``,
    the shipped keys plus ``PROVELY_TRUSTED_PUBLISHER_KEYS``, ``PROVELY_ALLOW_UNSIGNED_SKILLS``.
    """
    settings = settings or get_settings()
    if dirs is None:
        dirs = [SHIPPED_CONTRACTS_DIR, *settings.extra_contract_dirs()]
    if trusted_keys is None:
        paths = [SHIPPED_KEYS_DIR] if SHIPPED_KEYS_DIR.is_dir() else []
        paths += [Path(p) for p in settings.trusted_publisher_keys.split(":") if p]
        try:
            trusted_keys = load_trusted_keys(paths)
        except SkillError as exc:
            raise RegistryError([str(exc)]) from exc
    if allow_unsigned is None:
        allow_unsigned = settings.allow_unsigned_skills
    loader = _Loader(trusted_keys, allow_unsigned)
    seen: set[Path] = set()
    for root in dirs:
        resolved = root.resolve()
        if resolved in seen:
            continue
        seen.add(resolved)
        loader.load_root(root)
    if loader.problems:
        raise RegistryError(loader.problems)
    return Registry(loader.entries.values(), loader.skills)


@lru_cache(maxsize=1)
def get_registry() -> Registry:
    """The process-wide registry from the settings, loaded on first use."""
    return load_registry()
