"""CLI: ``provely contracts lint|list|show|hash|render``.

``lint`` works on files (contracts and skill manifests, YAML or JSON) without loading the
registry; the other commands read the registry, so a tampered skill or a conflict stops them
with the registry's message. Exit codes: 0 clean, 1 findings, 2 nothing could be checked
(a path that does not exist, a file that cannot be read, no contract files at all).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from shared.core.lint.findings import LintError
    from shared.trust.registry import RegisteredContract

__all__ = ["register"]

group = typer.Typer(
    help="Completion contracts: lint, inspect, hash and render.", no_args_is_help=True
)

_SUFFIXES = (".yaml", ".yml", ".json")


def _fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def _files(paths: list[Path]) -> Iterator[Path]:
    for path in paths:
        if path.is_dir():
            yield from sorted(
                p
                for p in path.rglob("*")
                if p.is_file()
                and p.suffix in _SUFFIXES
                and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
        elif path.is_file():
            yield path
        else:
            raise _fail(f"{path}: no such file or directory", 2)


def _parse(path: Path) -> tuple[Any, LintError | None]:
    from shared.core.lint.findings import LintError
    from shared.trust.registry import parse_document

    try:
        return parse_document(path), None
    except ValueError as exc:
        if isinstance(exc.__cause__, OSError | UnicodeDecodeError):
            raise _fail(str(exc), 2) from None  # nothing to check: not a finding
        message = str(exc).removeprefix(f"{path}: ")
        return None, LintError(str(path), "?", "(document)", message)


def _unsigned(path: Path, data: Any) -> str | None:
    """Why the skill at ``path`` is not signed yet (no sha256 recorded, no skill.sig), or None.

    Not a finding: a skill is written first and signed last (``provely skills sign``)."""
    from shared.trust.skills import SIGNATURE_FILE

    listed = data.get("contracts") if isinstance(data, dict) else None
    missing = [
        str(item.get("file"))
        for item in (listed if isinstance(listed, list) else [])
        if isinstance(item, dict) and not item.get("sha256")
    ]
    reasons = []
    if missing:
        reasons.append(f"no sha256 recorded for {', '.join(missing)}")
    if not (path.parent / SIGNATURE_FILE).is_file():
        reasons.append(f"no {SIGNATURE_FILE}")
    if not reasons:
        return None
    return f"{path}: unsigned ({'; '.join(reasons)}): sign it with `provely skills sign`"


def _lint_skill(path: Path, data: Any) -> list[LintError]:
    from shared.core.contract import Contract
    from shared.core.lint.skill import lint_skill_manifest

    files: dict[str, bytes | None] = {}
    contracts: dict[str, Contract] = {}
    listed = data.get("contracts") if isinstance(data, dict) else None
    for item in listed if isinstance(listed, list) else []:
        name = item.get("file") if isinstance(item, dict) else None
        if not isinstance(name, str):
            continue
        target = path.parent / name
        try:
            files[name] = target.read_bytes()
        except OSError:
            files[name] = None
            continue
        parsed, error = _parse(target)
        if error is None and isinstance(parsed, dict):
            # an invalid contract is reported when the contract file itself is linted
            with contextlib.suppress(ValueError):
                contracts[name] = Contract.model_validate(parsed)
    return lint_skill_manifest(data, file=str(path), files=files, contracts=contracts)


@group.command("lint")
def lint(  # noqa: C901  # pay down: contracts, skills and output in one; a step each
    paths: list[Path] = typer.Argument(
        None,
        help="Files or directories (default: ./contracts, else the shipped contracts).",
        show_default=False,
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the findings as JSON."),
) -> None:
    """Check contracts and skill manifests: exit 0 clean, 1 findings, 2 cannot read.

    A skill manifest that is not signed yet (no hashes, no skill.sig) is reported as unsigned,
    which is not a finding.
    """
    from shared.core.contract import contract_hash
    from shared.core.lint.document import is_skill_manifest, validate_contract
    from shared.core.lint.findings import LintError

    if not paths:
        from shared.trust.registry import SHIPPED_CONTRACTS_DIR

        local = Path("contracts")
        paths = [local if local.is_dir() else SHIPPED_CONTRACTS_DIR]
    targets = list(_files(paths))
    if not targets:
        raise _fail("no contract files found", 2)
    errors: list[LintError] = []
    unsigned: list[str] = []
    seen: dict[tuple[str, str], tuple[str, Path]] = {}
    n_contracts = n_skills = 0
    for path in targets:
        data, parse_error = _parse(path)
        if parse_error is not None:
            errors.append(parse_error)
            continue
        if is_skill_manifest(data):
            n_skills += 1
            errors += _lint_skill(path, data)
            note = _unsigned(path, data)
            if note is not None:
                unsigned.append(note)
            continue
        n_contracts += 1
        contract, found = validate_contract(data, file=str(path))
        errors += found
        if contract is None:
            continue
        key = (contract.id, contract.version)
        digest = contract_hash(contract)
        if key in seen and seen[key][0] != digest:
            errors.append(
                LintError(
                    str(path),
                    contract.id,
                    "version",
                    f"{contract.version} is also defined, differently, in {seen[key][1]}",
                )
            )
        seen.setdefault(key, (digest, path))
    if as_json:
        document = {"errors": [e.as_dict() for e in errors], "unsigned": unsigned}
        typer.echo(json.dumps(document, indent=2))
    else:
        for error in errors:
            typer.echo(str(error))
        for note in unsigned:
            typer.echo(f"note: {note}")
    files = f"{len(targets)} file{'s' if len(targets) != 1 else ''}"
    kinds = f"{n_contracts} contract(s), {n_skills} skill manifest(s)"
    if errors:
        typer.echo(f"{len(errors)} error(s) in {files} ({kinds})", err=True)
        raise typer.Exit(1)
    if not as_json:
        typer.echo(f"ok: {files} ({kinds})")


def _registry_entry(contract_id: str, version: str | None) -> RegisteredContract:
    from shared.trust.registry import ContractNotFoundError, RegistryError, get_registry

    try:
        return get_registry().entry(contract_id, version)
    except ContractNotFoundError as exc:
        raise _fail(str(exc)) from None
    except RegistryError as exc:
        for problem in exc.problems:
            typer.echo(problem, err=True)
        raise _fail("contracts could not be loaded") from None


@group.command("list")
def list_contracts() -> None:
    """List the loaded contracts: id, version, hash prefix, certification, file."""
    from shared.trust.registry import RegistryError, get_registry

    try:
        registry = get_registry()
    except RegistryError as exc:
        for problem in exc.problems:
            typer.echo(problem, err=True)
        raise _fail("contracts could not be loaded") from None
    for e in registry.entries():
        c = e.contract
        typer.echo(f"{c.id}\t{c.version}\t{e.hash[:16]}\t{e.certification}\t{e.path}")


@group.command("show")
def show(
    contract_id: str = typer.Argument(..., metavar="ID"),
    version: str | None = typer.Option(None, "--version", help="Exact version (default newest)."),
) -> None:
    """Print a contract as JSON, with its hash and where it was loaded from."""
    entry = _registry_entry(contract_id, version)
    document: dict[str, Any] = entry.contract.document()
    document["hash"] = entry.hash
    document["loaded"] = {
        "file": str(entry.path),
        "certification": entry.certification,
        "signed": entry.signed,
    }
    typer.echo(json.dumps(document, indent=2, ensure_ascii=False))


@group.command("hash")
def hash_file(path: Path = typer.Argument(..., help="A contract file (YAML or JSON).")) -> None:
    """Print the sha256 of a contract's canonical JSON (pages show its first 16 digits)."""
    from shared.core.contract import contract_hash
    from shared.core.lint.document import validate_contract

    if not path.is_file():
        raise _fail(f"{path}: no such file", 2)
    data, error = _parse(path)
    if error is not None:
        raise _fail(str(error))
    contract, errors = validate_contract(data, file=str(path))
    if contract is None:
        for e in errors:
            typer.echo(str(e), err=True)
        raise _fail(f"{path}: not a valid contract")
    typer.echo(contract_hash(contract))


@group.command("render")
def render(
    contract_id: str = typer.Argument(..., metavar="ID"),
    version: str | None = typer.Option(None, "--version", help="Exact version (default newest)."),
    out: Path | None = typer.Option(None, "--out", help="Write the page to this file."),
) -> None:
    """Print the Markdown page of a contract."""
    from shared.core.render import render_page

    entry = _registry_entry(contract_id, version)
    page = render_page(
        entry.contract,
        digest=entry.hash,
        certification=entry.certification,
        skill_title=entry.skill_title(),
    )
    if out is None:
        typer.echo(page, nl=False)
        return
    try:
        out.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise _fail(f"{out}: cannot write: {exc.strerror}") from None
    typer.echo(f"wrote {out}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.add_typer(group, name="contracts")
