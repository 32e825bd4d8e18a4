"""Console users' passwords: generated with their user's id in front, hashed with a salt of
their own and the parameters beside it, checked by the one derivation every outcome costs."""

from __future__ import annotations

import pytest

import shared.trust.passwords as passwords
from shared.trust.passwords import check_password, hash_password, new_password, user_id_of


def test_a_password_checks_against_its_own_hash_only() -> None:
    first, second = new_password("cu_a"), new_password("cu_a")
    assert first != second
    assert first.startswith("cu_a.")
    assert len(first) > 5 + 30
    stored = hash_password(first)
    assert stored.startswith(f"scrypt${passwords.SCRYPT_N}${passwords.SCRYPT_R}$")
    assert first not in stored
    assert hash_password(first) != stored  # a salt of its own
    assert check_password(first, stored)
    assert not check_password(second, stored)
    assert not check_password(first[:-1], stored)


@pytest.mark.parametrize(
    ("password", "user_id"),
    [
        ("cu_abc.secret", "cu_abc"),
        ("cu_abc.sec.ret", "cu_abc"),
        ("no dot at all", ""),
        (".starts-with-a-dot", ""),
        ("x" * 41 + ".long", ""),
        ("", ""),
    ],
)
def test_the_user_a_password_names(password: str, user_id: str) -> None:
    assert user_id_of(password) == user_id


@pytest.mark.parametrize("stored", [None, "", "scrypt$1$2", "bcrypt$x$y$z$a$b", "scrypt$a$b$c$d$e"])
def test_no_hash_or_an_unreadable_one_refuses_after_one_derivation(
    stored: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    derived: list[int] = []
    real = passwords._derive

    def counted(password: str, *, salt: bytes, n: int, r: int, p: int) -> bytes:
        derived.append(n)
        return real(password, salt=salt, n=n, r=r, p=p)

    monkeypatch.setattr(passwords, "_derive", counted)
    assert not check_password("cu_a.anything", stored)
    assert derived == [passwords.SCRYPT_N]


def test_older_parameters_stay_checkable() -> None:
    salt = b"0123456789abcdef"
    digest = passwords._derive("cu_a.x", salt=salt, n=2**10, r=8, p=1)
    stored = f"scrypt${2**10}$8$1${passwords._b64(salt)}${passwords._b64(digest)}"
    assert check_password("cu_a.x", stored)
    assert not check_password("cu_a.y", stored)
