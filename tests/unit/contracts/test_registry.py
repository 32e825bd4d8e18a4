"""The registry and signed skills: what loads, what is refused, and how versions are chosen.

Skills are copied to a temporary directory, edited, and signed with throw-away keys; the
shipped Stripe skill is checked with the project's public key in ``contracts/keys/``.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from typer.testing import CliRunner

from services.cli.main import app
from shared.core.contract import contract_hash
from shared.core.render import render_page
from shared.runtime.settings import Settings
from shared.trust.registry import (
    SHIPPED_CONTRACTS_DIR,
    SHIPPED_KEYS_DIR,
    ContractNotFoundError,
    RegistryError,
    load_registry,
)
from shared.trust.skills import (
    SkillError,
    key_id,
    load_trusted_keys,
    public_key_pem,
    sign_skill,
    verify_skill,
    write_keypair,
)
from tests.unit.contracts.helpers import STRIPE, shipped_files, shipped_versions

runner = CliRunner()
SHIPPED = shipped_versions("stripe.refund.succeeded")


def shipped_keys() -> dict[str, Ed25519PublicKey]:
    return load_trusted_keys([SHIPPED_KEYS_DIR])


def copy_skill(dest: Path) -> Path:
    shutil.copytree(STRIPE, dest)
    return dest


def edit_yaml(path: Path, change: dict[str, Any]) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data.update(change)
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")


def keys_with(extra: Ed25519PrivateKey) -> dict[str, Ed25519PublicKey]:
    keys = shipped_keys()
    keys[key_id(extra.public_key())] = extra.public_key()
    return keys


def _problems(exc: pytest.ExceptionInfo[RegistryError]) -> str:
    return "\n".join(exc.value.problems)


# --------------------------------------------------------------------------- the shipped skill


def test_signed_shipped_skill_loads() -> None:
    registry = load_registry([SHIPPED_CONTRACTS_DIR], trusted_keys=shipped_keys())
    assert registry.ids() == [
        "app.entitlement.revoked",
        "stripe.refund.created",
        "stripe.refund.succeeded",
    ]
    for entry in registry.entries():
        assert entry.certification == (
            "example" if entry.contract.id.startswith("app.") else "community"
        )
        assert entry.signed
        assert entry.hash == contract_hash(entry.contract)
    skill = registry.skill("stripe")
    assert skill is not None
    assert skill.signed
    assert skill.key_id in {key_id(key) for key in shipped_keys().values()}
    assert registry.skill("github") is None


def test_shipped_skill_verifies_with_the_project_key() -> None:
    check = verify_skill(STRIPE, shipped_keys())
    assert check.ok, check.problems
    # Every contract file of the directory is listed in the signed manifest.
    assert {e.file for e in check.manifest.contracts} == {
        path.name for versions in shipped_files().values() for path in versions.values()
    }
    assert "refund.succeeded.v1.2.0.yaml" in {e.file for e in check.manifest.contracts}


def test_shipped_skill_is_refused_without_trusted_keys() -> None:
    with pytest.raises(RegistryError) as exc:
        load_registry([SHIPPED_CONTRACTS_DIR], trusted_keys={})
    assert "skill.sig: signed by key" in _problems(exc)
    assert "not a trusted publisher key" in _problems(exc)


# --------------------------------------------------------------------------- tampering


def test_one_byte_changed_in_a_contract_is_refused_naming_the_file(tmp_path: Path) -> None:
    skill = copy_skill(tmp_path / "stripe")
    target = skill / "refund.succeeded.yaml"
    raw = bytearray(target.read_bytes())
    at = raw.index(b"max_attempts: 40") + len("max_attempts: 4")
    raw[at] = ord("1")  # 40 -> 41: still a valid contract, only the hash tells
    target.write_bytes(bytes(raw))
    with pytest.raises(RegistryError) as exc:
        load_registry([tmp_path], trusted_keys=shipped_keys())
    problems = _problems(exc)
    assert f"{target}: content differs from the sha256 recorded" in problems
    assert "refund.created.yaml" not in problems


def test_wrong_signature_is_refused_naming_the_signature_file(tmp_path: Path) -> None:
    skill = copy_skill(tmp_path / "stripe")
    sig = skill / "skill.sig"
    doc = json.loads(sig.read_text())
    raw = bytearray(base64.b64decode(doc["signature"]))
    raw[0] ^= 0x01
    doc["signature"] = base64.b64encode(bytes(raw)).decode()
    sig.write_text(json.dumps(doc))
    with pytest.raises(RegistryError) as exc:
        load_registry([tmp_path], trusted_keys=shipped_keys())
    assert f"{sig}: the signature does not match" in _problems(exc)


def test_signature_by_an_untrusted_key_is_refused(tmp_path: Path) -> None:
    skill = copy_skill(tmp_path / "stripe")
    sign_skill(skill, Ed25519PrivateKey.generate())
    with pytest.raises(RegistryError) as exc:
        load_registry([tmp_path], trusted_keys=shipped_keys())
    assert "which is not a trusted publisher key" in _problems(exc)


def test_edited_manifest_breaks_the_signature(tmp_path: Path) -> None:
    skill = copy_skill(tmp_path / "stripe")
    edit_yaml(skill / "skill.yaml", {"default_base_url": "https://evil.example"})
    with pytest.raises(RegistryError) as exc:
        load_registry([tmp_path], trusted_keys=shipped_keys())
    assert "the signature does not match" in _problems(exc)


def test_missing_signature_is_refused(tmp_path: Path) -> None:
    skill = copy_skill(tmp_path / "stripe")
    (skill / "skill.sig").unlink()
    with pytest.raises(RegistryError) as exc:
        load_registry([tmp_path], trusted_keys=shipped_keys())
    assert f"{skill / 'skill.sig'}: missing" in _problems(exc)


def test_allow_unsigned_loads_a_tampered_skill_as_unsigned(tmp_path: Path) -> None:
    skill = copy_skill(tmp_path / "stripe")
    with (skill / "refund.created.yaml").open("a") as fh:
        fh.write("\n# local edit\n")
    registry = load_registry([tmp_path], trusted_keys=shipped_keys(), allow_unsigned=True)
    entry = registry.entry("stripe.refund.created")
    assert entry.certification == "unsigned"
    assert not entry.signed
    assert registry.entry("stripe.refund.succeeded").certification == "unsigned"
    page = render_page(entry.contract, digest=entry.hash, certification=entry.certification)
    assert "| Certification | Unsigned |" in page


def test_unsigned_loose_contract_is_refused_unless_allowed(tmp_path: Path) -> None:
    loose = tmp_path / "mine.yaml"
    shutil.copy(STRIPE / "refund.created.yaml", loose)
    with pytest.raises(RegistryError) as exc:
        load_registry([tmp_path], trusted_keys=shipped_keys())
    assert f"{loose}: not listed in a signed skill manifest" in _problems(exc)
    registry = load_registry([tmp_path], trusted_keys=shipped_keys(), allow_unsigned=True)
    assert registry.entry("stripe.refund.created").certification == "unsigned"


def test_contract_that_does_not_lint_is_refused_even_when_signed(tmp_path: Path) -> None:
    skill = copy_skill(tmp_path / "stripe")
    data = yaml.safe_load((skill / "refund.created.yaml").read_text())
    data["timing"]["poll_interval_ms"] = -1
    (skill / "refund.created.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    key = Ed25519PrivateKey.generate()
    sign_skill(skill, key)
    with pytest.raises(RegistryError) as exc:
        load_registry([tmp_path], trusted_keys=keys_with(key))
    assert "stripe.refund.created: timing.poll_interval_ms: must be positive" in _problems(exc)


# --------------------------------------------------------------------------- versions


def _skill_with_version(root: Path, version: str, key: Ed25519PrivateKey) -> Path:
    skill = copy_skill(root / f"stripe-{version}")
    for other in skill.glob("*.yaml"):
        if other.name not in ("skill.yaml", "refund.succeeded.yaml"):
            other.unlink()
    edit_yaml(skill / "skill.yaml", {"contracts": [{"file": "refund.succeeded.yaml"}]})
    edit_yaml(skill / "refund.succeeded.yaml", {"version": version})
    sign_skill(skill, key)
    return skill


def test_versions_side_by_side_and_get_picks_the_newest(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    _skill_with_version(tmp_path, "1.9.0", key)
    registry = load_registry([SHIPPED_CONTRACTS_DIR, tmp_path], trusted_keys=keys_with(key))
    assert registry.versions("stripe.refund.succeeded") == [*SHIPPED, "1.9.0"]
    assert registry.get("stripe.refund.succeeded").version == "1.9.0"
    old = registry.entry("stripe.refund.succeeded", "1.0.0")
    assert old.contract.version == "1.0.0"
    assert registry.by_hash(old.hash) is old
    loaded = re.escape(", ".join([*SHIPPED, "1.9.0"]))
    with pytest.raises(ContractNotFoundError, match=rf"no version 2\.0\.0 \(loaded: {loaded}\)"):
        registry.get("stripe.refund.succeeded", "2.0.0")
    with pytest.raises(ContractNotFoundError, match="unknown contract"):
        registry.get("stripe.refund.nothing")


def test_newest_is_by_semantic_version_not_by_text(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    _skill_with_version(tmp_path, "1.9.0", key)
    _skill_with_version(tmp_path, "1.10.0", key)
    registry = load_registry([tmp_path], trusted_keys=keys_with(key))
    assert registry.get("stripe.refund.succeeded").version == "1.10.0"
    assert registry.versions("stripe.refund.succeeded") == ["1.9.0", "1.10.0"]


def test_conflicting_files_are_refused_naming_both(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    skill = copy_skill(tmp_path / "stripe-copy")
    edit_yaml(skill / "refund.succeeded.yaml", {"title": "A different title, same version."})
    sign_skill(skill, key)
    with pytest.raises(RegistryError) as exc:
        load_registry([SHIPPED_CONTRACTS_DIR, tmp_path], trusted_keys=keys_with(key))
    problems = _problems(exc)
    assert str(skill / "refund.succeeded.yaml") in problems
    assert str(SHIPPED_CONTRACTS_DIR / "stripe" / "refund.succeeded.yaml") in problems
    assert "same id and version, different content" in problems


def test_identical_copies_are_not_a_conflict(tmp_path: Path) -> None:
    copy_skill(tmp_path / "stripe-copy")
    registry = load_registry([SHIPPED_CONTRACTS_DIR, tmp_path], trusted_keys=shipped_keys())
    assert registry.versions("stripe.refund.succeeded") == SHIPPED


def test_settings_supply_the_paths_and_the_trusted_keys(tmp_path: Path) -> None:
    private, public, _ = write_keypair(tmp_path / "keys" / "publisher.key")
    key = _load_private(private)
    _skill_with_version(tmp_path / "extra", "2.0.0", key)
    settings = Settings(
        contract_paths=str(tmp_path / "extra"),
        trusted_publisher_keys=str(public),
        allow_unsigned_skills=False,
    )
    registry = load_registry(settings=settings)
    assert registry.versions("stripe.refund.succeeded") == [*SHIPPED, "2.0.0"]
    with pytest.raises(RegistryError) as exc:
        load_registry(settings=Settings(contract_paths=str(tmp_path / "extra")))
    assert "not a trusted publisher key" in _problems(exc)
    with pytest.raises(RegistryError, match="contract directory does not exist"):
        load_registry(settings=Settings(contract_paths=str(tmp_path / "nowhere")))


def _load_private(path: Path) -> Ed25519PrivateKey:
    from shared.trust.skills import load_private_key

    return load_private_key(path)


# --------------------------------------------------------------------------- keys and the CLI


def test_keygen_refuses_to_overwrite(tmp_path: Path) -> None:
    write_keypair(tmp_path / "k")
    assert (tmp_path / "k").stat().st_mode & 0o777 == 0o600
    with pytest.raises(SkillError, match="already exists"):
        write_keypair(tmp_path / "k")


def test_bad_key_files_are_named(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.pub"
    bogus.write_text("not a key")
    with pytest.raises(SkillError, match=r"bogus\.pub: not a PEM public key"):
        load_trusted_keys([bogus])


def test_cli_keygen_sign_verify(tmp_path: Path) -> None:
    skill = copy_skill(tmp_path / "stripe")
    key = tmp_path / "publisher.key"
    result = runner.invoke(app, ["skills", "keygen", "--out", str(key)])
    assert result.exit_code == 0, result.output
    pub = Path(str(key) + ".pub")
    assert pub.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")

    result = runner.invoke(app, ["skills", "verify", str(skill), "--key", str(pub)])
    assert result.exit_code == 1
    assert "not a trusted publisher key" in result.output

    result = runner.invoke(app, ["skills", "sign", str(skill), "--key", str(key)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["skills", "verify", str(skill), "--key", str(pub)])
    assert result.exit_code == 0, result.output
    files = sum(len(versions) for versions in shipped_files().values())
    assert f"ok: skill stripe 0.1.0, {files} contract file(s)" in result.output

    with (skill / "refund.created.yaml").open("ab") as fh:
        fh.write(b" ")
    result = runner.invoke(app, ["skills", "verify", str(skill), "--key", str(pub)])
    assert result.exit_code == 1
    assert f"{skill / 'refund.created.yaml'}: content differs" in result.output


def test_cli_verify_shipped_skill_with_default_keys() -> None:
    result = runner.invoke(app, ["skills", "verify", str(STRIPE)])
    assert result.exit_code == 0, result.output


def test_cli_keygen_to_stdout() -> None:
    result = runner.invoke(app, ["skills", "keygen"])
    assert result.exit_code == 0
    assert "-----BEGIN PRIVATE KEY-----" in result.stdout
    assert "-----BEGIN PUBLIC KEY-----" in result.stdout


def test_cli_sign_with_a_missing_key(tmp_path: Path) -> None:
    skill = copy_skill(tmp_path / "stripe")
    result = runner.invoke(app, ["skills", "sign", str(skill), "--key", str(tmp_path / "none")])
    assert result.exit_code == 2  # a file it cannot read: it could not run (README, exit codes)
    assert "cannot read the key" in result.output


def test_public_key_pem_round_trip(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    path = tmp_path / "x.pub"
    path.write_bytes(public_key_pem(key.public_key()))
    assert list(load_trusted_keys([path])) == [key_id(key.public_key())]
