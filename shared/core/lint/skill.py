"""Checks of a skill manifest, and of the readback paths (and their query parameters) a contract
may read under its skill."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from shared.core.contract import Contract
from shared.core.lint.findings import LintError, validation_errors
from shared.core.lint.operands import is_event_expr
from shared.core.paths import template_within
from shared.core.queries import QueryDeclaration, undeclared_query
from shared.core.skill import SkillContractFile, SkillManifest

__all__ = ["lint_readback_paths", "lint_skill_manifest"]

_Report = Callable[[str, str], None]  # (field, message) of one finding


def lint_readback_paths(
    contract: Contract,
    declared: Mapping[str, Sequence[str] | None],
    *,
    file: str,
    queries: Mapping[str, QueryDeclaration | None] | None = None,
    providers: Iterable[str] | None = None,
) -> list[LintError]:
    """Errors for the ``http`` channels of ``contract`` that read outside the paths their
    provider's skill declares (``declared``: provider → its skill's ``readback.paths``, None
    when the skill declares none), or send query parameters (or values) that the skill does
    not declare for the path (``queries``: provider → its skill's ``readback.query``; a
    provider absent there declares none, so its paths take no query). Only channels of
    ``providers`` are checked (default: every provider in ``declared``); a checked provider
    without declared paths reads nothing."""
    checked = set(declared if providers is None else providers)
    errors: list[LintError] = []
    for i, ch in enumerate(contract.channels):
        if ch.http is None:
            continue
        provider = ch.provider_of(contract)
        if provider not in checked:
            continue
        allowed = declared.get(provider)
        field = f"channels[{i}].http.path"
        if not allowed:
            errors.append(
                LintError(
                    file,
                    contract.id,
                    field,
                    f"no {provider} skill declares readback paths (readback.paths), so a "
                    f"contract cannot read {provider}",
                )
            )
        elif not template_within(ch.http.path, allowed):
            errors.append(
                LintError(
                    file,
                    contract.id,
                    field,
                    f"{ch.http.path} is not among the paths the {provider} skill declares "
                    f"(readback.paths: {', '.join(allowed)})",
                )
            )
        else:
            for problem in undeclared_query(
                ch.http.path,
                ch.http.query,
                paths=allowed,
                declared=(queries or {}).get(provider),
            ):
                errors.append(
                    LintError(
                        file,
                        contract.id,
                        f"channels[{i}].http.query",
                        f"{problem} (readback.query of the {provider} skill)",
                    )
                )
    return errors


def lint_skill_manifest(
    data: Any,
    *,
    file: str,
    files: Mapping[str, bytes | None] | None = None,
    contracts: Mapping[str, Contract] | None = None,
) -> list[LintError]:
    """Check a skill manifest. With ``files`` (listed name → bytes, None when missing) the
    recorded sha256 of each contract file is compared; with ``contracts`` (listed name →
    parsed contract) each contract must name this skill's provider, version and certification.
    """
    subject = _skill_subject(data)
    if not isinstance(data, Mapping):
        return [LintError(file, subject, "(document)", "expected a mapping of fields")]
    try:
        manifest = SkillManifest.model_validate(data)
    except ValidationError as exc:
        return validation_errors(exc, file=file, subject=subject)
    errors: list[LintError] = []

    def err(field: str, message: str) -> None:
        errors.append(LintError(file, subject, field, message))

    seen: set[str] = set()
    for i, entry in enumerate(manifest.contracts):
        where = f"contracts[{i}]"
        if entry.file in seen:
            err(f"{where}.file", f"{entry.file} is listed twice")
        seen.add(entry.file)
        # No sha256 yet is not an error: a skill is written first and signed last (the
        # signature check refuses an unsigned skill when it is loaded).
        if files is not None:
            _listed_file(err, where, entry, files.get(entry.file))
        if contracts is not None and entry.file in contracts:
            _listed_contract(err, where, entry, contracts[entry.file], manifest)
            errors.extend(_listed_readback(contracts[entry.file], manifest, file=file))
    _event_shape(err, manifest)
    if manifest.default_base_url is not None and not manifest.default_base_url.startswith(
        ("https://", "http://")
    ):
        err("default_base_url", "must be an http(s) URL")
    return errors


def _listed_file(err: _Report, where: str, entry: SkillContractFile, content: bytes | None) -> None:
    """A listed contract file exists and, once signed, has the sha256 the manifest records."""
    if content is None:
        err(f"{where}.file", f"{entry.file} does not exist")
    elif entry.sha256 is not None and hashlib.sha256(content).hexdigest() != entry.sha256:
        err(f"{where}.sha256", f"{entry.file} changed since the skill was signed (sha256 differs)")


def _listed_contract(
    err: _Report, where: str, entry: SkillContractFile, c: Contract, manifest: SkillManifest
) -> None:
    """A listed contract names this skill (provider and version) and its certification."""
    if (c.skill.provider, c.skill.version) != (manifest.provider, manifest.version):
        err(
            f"{where}.file",
            f"{entry.file} names skill {c.skill.provider} {c.skill.version}, "
            f"not {manifest.provider} {manifest.version}",
        )
    if c.certification != manifest.certification:
        err(
            f"{where}.file",
            f"{entry.file} has certification {c.certification}, the skill {manifest.certification}",
        )


def _listed_readback(c: Contract, manifest: SkillManifest, *, file: str) -> list[LintError]:
    """A listed contract reads back only the paths (and queries) the skill declares."""
    declared = manifest.readback.paths if manifest.readback else None
    if declared is None:
        return []
    query = manifest.readback.query if manifest.readback else None
    return lint_readback_paths(
        c, {manifest.provider: declared}, file=file, queries={manifest.provider: query}
    )


def _event_shape(err: _Report, manifest: SkillManifest) -> None:
    if manifest.event_shape is None:
        return
    shape = manifest.event_shape.model_dump()
    keys = shape.pop("correlation_keys")
    for name, expr in [
        *shape.items(),
        *((f"correlation_keys.{k}", v) for k, v in keys.items()),
    ]:
        if expr is not None and not is_event_expr(expr):
            err(f"event_shape.{name}", f"must be a $event.… expression, got {expr!r}")


def _skill_subject(data: Any) -> str:
    if isinstance(data, Mapping):
        provider = data.get("provider")
        version = data.get("version")
        if isinstance(provider, str) and isinstance(version, str):
            return f"skill {provider} {version}"
        if isinstance(provider, str):
            return f"skill {provider}"
    return "skill ?"
