"""CLI: ``provely skills keygen|sign|verify`` — publisher keys and signed skill directories."""

from __future__ import annotations

from pathlib import Path

import typer

__all__ = ["register"]

group = typer.Typer(
    help="Signed skills: publisher keys, signing, verification.", no_args_is_help=True
)


def _fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


@group.command("keygen")
def keygen(
    out: Path | None = typer.Option(
        None,
        "--out",
        help="Write the private key here (mode 0600) and the public key to FILE.pub. "
        "Without it both PEM blocks are printed.",
    ),
) -> None:
    """Create an Ed25519 publisher key pair."""
    from shared.trust.skills import (
        SkillError,
        generate_private_key,
        key_id,
        private_key_pem,
        public_key_pem,
        write_keypair,
    )

    if out is None:
        key = generate_private_key()
        typer.echo(private_key_pem(key).decode("ascii"), nl=False)
        typer.echo(public_key_pem(key.public_key()).decode("ascii"), nl=False)
        typer.echo(f"key id {key_id(key.public_key())}", err=True)
        return
    try:
        private_path, public_path, kid = write_keypair(out)
    except SkillError as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(f"{out}: cannot write: {exc.strerror}") from None
    typer.echo(f"private key {private_path} (keep it secret)")
    typer.echo(f"public key  {public_path} (key id {kid})")


@group.command("sign")
def sign(
    directory: Path = typer.Argument(..., metavar="DIR", help="A skill directory (skill.yaml)."),
    key: Path = typer.Option(..., "--key", help="The publisher's private key (PEM)."),
) -> None:
    """Record each contract file's sha256 in the manifest and write skill.sig.

    Exit 2 when the key cannot be read or the skill not written, 1 when the skill does not
    sign (a manifest or contract with problems)."""
    from shared.trust.skills import SIGNATURE_FILE, SkillError, load_private_key, sign_skill

    try:
        private_key = load_private_key(key)
    except SkillError as exc:
        raise _fail(str(exc), 2) from None
    try:
        check = sign_skill(directory, private_key)
    except SkillError as exc:
        raise _fail(str(exc)) from None
    except OSError as exc:
        raise _fail(f"{directory}: cannot write: {exc.strerror}", 2) from None
    m = check.manifest
    typer.echo(
        f"signed skill {m.provider} {m.version} ({len(m.contracts)} contract file(s)) "
        f"with key {check.key_id}: {directory / SIGNATURE_FILE}"
    )


@group.command("verify")
def verify(
    directory: Path = typer.Argument(..., metavar="DIR", help="A skill directory (skill.yaml)."),
    key: list[Path] = typer.Option(
        None,
        "--key",
        help="Trusted public key file(s); default: the project's keys and "
        "PROVELY_TRUSTED_PUBLISHER_KEYS.",
    ),
) -> None:
    """Check the manifest's signature and every listed file's sha256; exit 1 on any problem."""
    from shared.runtime.settings import get_settings
    from shared.trust.registry import SHIPPED_KEYS_DIR
    from shared.trust.skills import SkillError, load_trusted_keys, verify_skill

    if key:
        paths = list(key)
    else:
        paths = [SHIPPED_KEYS_DIR] if SHIPPED_KEYS_DIR.is_dir() else []
        paths += [Path(p) for p in get_settings().trusted_publisher_keys.split(":") if p]
    try:
        trusted = load_trusted_keys(paths)
        check = verify_skill(directory, trusted)
    except SkillError as exc:
        raise _fail(str(exc)) from None
    if not trusted:
        typer.echo("warning: no trusted publisher keys configured", err=True)
    for problem in check.problems:
        typer.echo(problem, err=True)
    m = check.manifest
    if not check.ok:
        raise _fail(f"skill {m.provider} {m.version} does not verify")
    typer.echo(
        f"ok: skill {m.provider} {m.version}, {len(m.contracts)} contract file(s), "
        f"signed by key {check.key_id}"
    )


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.add_typer(group, name="skills")
