"""Signed skills: Ed25519 publisher keys, signing a skill directory, verifying it at load.

A skill directory holds ``skill.yaml`` (the manifest, see ``shared.core.skill``), the contract
files it lists, and ``skill.sig``, a detached signature::

    {"algorithm": "ed25519", "key_id": "<16 hex>", "signature": "<base64>"}

The signature covers ``manifest_signing_payload(manifest)``: a domain prefix and the canonical
JSON of the validated manifest, which records the sha256 of every listed contract file's bytes.
So one changed byte in a contract shows as a hash mismatch, and any change to the manifest as a
signature failure. ``key_id`` is the first 16 hex digits of the sha256 of the raw public key.

Errors: :class:`SkillError` (bad key files, unreadable manifests). Verification returns a
:class:`SkillCheck` whose ``problems`` each name the file they concern, so callers decide
whether to refuse the skill or to load it as ``unsigned``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import ValidationError

from shared.core.lint.findings import validation_errors
from shared.core.skill import SkillContractFile, SkillManifest, manifest_signing_payload

__all__ = [
    "MANIFEST_FILE",
    "SIGNATURE_FILE",
    "SkillCheck",
    "SkillError",
    "generate_private_key",
    "key_id",
    "load_private_key",
    "load_public_key",
    "load_trusted_keys",
    "private_key_pem",
    "public_key_pem",
    "read_manifest",
    "sign_skill",
    "verify_skill",
    "write_keypair",
]

MANIFEST_FILE = "skill.yaml"
SIGNATURE_FILE = "skill.sig"
_MANIFEST_HEADER = (
    "# Skill manifest. The signature in skill.sig covers these fields and the sha256 of every\n"
    "# listed contract file: after any edit here or in a contract, run `provely skills sign`.\n"
)


class SkillError(Exception):
    """A key or manifest that cannot be used at all (unreadable, malformed)."""


@dataclass(frozen=True)
class SkillCheck:
    """The outcome of verifying one skill directory."""

    directory: Path
    manifest: SkillManifest
    manifest_path: Path
    key_id: str | None = None
    problems: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not self.problems


# --------------------------------------------------------------------------- keys


def generate_private_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()


def private_key_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def public_key_pem(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def key_id(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def write_keypair(private_path: Path) -> tuple[Path, Path, str]:
    """Write a new private key (mode 0600, refusing to overwrite) and ``<path>.pub``."""
    public_path = private_path.with_name(private_path.name + ".pub")
    for path in (private_path, public_path):
        if path.exists():
            raise SkillError(f"{path}: already exists; refusing to overwrite a key")
    key = generate_private_key()
    private_path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(private_key_pem(key))
    public_path.write_bytes(public_key_pem(key.public_key()))
    return private_path, public_path, key_id(key.public_key())


def load_private_key(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except OSError as exc:
        raise SkillError(f"{path}: cannot read the key: {exc.strerror}") from exc
    except (ValueError, TypeError) as exc:
        raise SkillError(f"{path}: not an unencrypted PEM private key") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise SkillError(f"{path}: not an Ed25519 private key")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except OSError as exc:
        raise SkillError(f"{path}: cannot read the key: {exc.strerror}") from exc
    except (ValueError, TypeError) as exc:
        raise SkillError(f"{path}: not a PEM public key") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise SkillError(f"{path}: not an Ed25519 public key")
    return key


def load_trusted_keys(paths: Iterable[Path]) -> dict[str, Ed25519PublicKey]:
    """Public key files (``*.pub`` inside a directory) by key id."""
    keys: dict[str, Ed25519PublicKey] = {}
    for path in paths:
        files = sorted(path.glob("*.pub")) if path.is_dir() else [path]
        for file in files:
            key = load_public_key(file)
            keys[key_id(key)] = key
    return keys


# --------------------------------------------------------------------------- manifests


def _manifest_file(directory: Path) -> Path:
    path = directory / MANIFEST_FILE
    if not path.is_file():
        raise SkillError(f"{path}: no skill manifest here")
    return path


def _parse(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SkillError(f"{path}: cannot read: {exc}") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise SkillError(f"{path}: not valid YAML: {exc}") from exc


def read_manifest(directory: Path) -> tuple[SkillManifest, Path]:
    """Parse and validate ``skill.yaml``; errors name the file and the field."""
    path = _manifest_file(directory)
    data = _parse(path)
    if not isinstance(data, dict):
        raise SkillError(f"{path}: expected a mapping of fields")
    try:
        return SkillManifest.model_validate(data), path
    except ValidationError as exc:
        subject = f"skill {data.get('provider', '?')}"
        lines = [str(e) for e in validation_errors(exc, file=str(path), subject=subject)]
        raise SkillError("\n".join(lines)) from exc


def _file_hash(directory: Path, entry: SkillContractFile) -> str | None:
    try:
        return hashlib.sha256((directory / entry.file).read_bytes()).hexdigest()
    except OSError:
        return None


def sign_skill(directory: Path, key: Ed25519PrivateKey) -> SkillCheck:
    """Record the sha256 of every listed file in the manifest, rewrite it, write ``skill.sig``."""
    manifest, path = read_manifest(directory)
    entries: list[SkillContractFile] = []
    for entry in manifest.contracts:
        digest = _file_hash(directory, entry)
        if digest is None:
            raise SkillError(f"{directory / entry.file}: listed in {path} but cannot be read")
        entries.append(SkillContractFile(file=entry.file, sha256=digest))
    signed = manifest.model_copy(update={"contracts": tuple(entries)})
    signed = SkillManifest.model_validate(signed.document())
    body = yaml.safe_dump(signed.document(), sort_keys=False, allow_unicode=True, width=100)
    path.write_text(_MANIFEST_HEADER + body, encoding="utf-8")
    kid = key_id(key.public_key())
    signature = key.sign(manifest_signing_payload(signed))
    document = {
        "algorithm": "ed25519",
        "key_id": kid,
        "signature": base64.b64encode(signature).decode("ascii"),
    }
    (directory / SIGNATURE_FILE).write_text(json.dumps(document, indent=2) + "\n", "utf-8")
    return SkillCheck(directory=directory, manifest=signed, manifest_path=path, key_id=kid)


def _read_signature(sig_path: Path) -> tuple[str, bytes] | str:
    try:
        doc = json.loads(sig_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"{sig_path}: missing; the skill is not signed"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"{sig_path}: unreadable signature file: {exc}"
    if (
        not isinstance(doc, dict)
        or doc.get("algorithm") != "ed25519"
        or not isinstance(doc.get("key_id"), str)
        or not isinstance(doc.get("signature"), str)
    ):
        return f"{sig_path}: expected {{algorithm: ed25519, key_id, signature}}"
    try:
        raw = base64.b64decode(doc["signature"], validate=True)
    except ValueError:
        return f"{sig_path}: the signature is not base64"
    return doc["key_id"], raw


def verify_skill(
    directory: Path, trusted: dict[str, Ed25519PublicKey] | Sequence[Ed25519PublicKey]
) -> SkillCheck:
    """Check every listed file's sha256 and the signature against the trusted keys.

    Raises :class:`SkillError` only when the manifest itself cannot be read; every other
    problem is returned in ``SkillCheck.problems`` naming the file concerned.
    """
    keys = trusted if isinstance(trusted, dict) else {key_id(k): k for k in trusted}
    manifest, path = read_manifest(directory)
    problems: list[str] = []
    for entry in manifest.contracts:
        file = directory / entry.file
        digest = _file_hash(directory, entry)
        if digest is None:
            problems.append(f"{file}: listed in {path} but missing or unreadable")
        elif entry.sha256 is None:
            problems.append(f"{file}: no sha256 recorded in {path}; the skill is not signed")
        elif digest != entry.sha256:
            problems.append(
                f"{file}: content differs from the sha256 recorded in {path} "
                "(changed after signing)"
            )
    sig_path = directory / SIGNATURE_FILE
    parsed = _read_signature(sig_path)
    kid: str | None = None
    if isinstance(parsed, str):
        problems.append(parsed)
    else:
        kid, raw = parsed
        key = keys.get(kid)
        if key is None:
            problems.append(
                f"{sig_path}: signed by key {kid}, which is not a trusted publisher key"
            )
        else:
            try:
                key.verify(raw, manifest_signing_payload(manifest))
            except InvalidSignature:
                problems.append(
                    f"{sig_path}: the signature does not match {path} (manifest changed or "
                    "wrong signature)"
                )
    return SkillCheck(
        directory=directory,
        manifest=manifest,
        manifest_path=path,
        key_id=kid,
        problems=tuple(problems),
    )
