"""The README's exit-code rule, command by command: 0 all is well, 1 it ran and found a problem,
2 it could not check or run at all. Each case that cannot run says so in one line on stderr
(no traceback), and leaves nothing behind: no banner, no state file, no database.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from services.cli.spawn import free_port, provely_argv
from shared.trust.registry import SHIPPED_CONTRACTS_DIR


@dataclass
class Case:
    """A command run in an empty directory ``work`` with ``env`` on top of a clean one."""

    argv: Callable[[Path, int], list[str]]
    code: int
    says: str
    env: Callable[[Path], dict[str, str]] = field(default=lambda _work: {})
    leaves_nothing: bool = True  # ``work`` holds nothing new afterwards


def _tampered_skill(work: Path) -> dict[str, str]:
    skill = work.parent / "tampered"
    shutil.copytree(SHIPPED_CONTRACTS_DIR / "stripe", skill)
    contract = skill / "refund.succeeded.yaml"
    contract.write_text(contract.read_text() + "\n# changed after signing\n")
    return {"PROVELY_CONTRACT_PATHS": str(skill)}


def _missing_system(work: Path) -> dict[str, str]:
    return {"PROVELY_DATA_DIR": str(work / ".provely")}


CASES = {
    "up: port taken": Case(lambda _w, taken: ["up", "--port", str(taken)], 2, "cannot listen"),
    "sandbox stripe: port taken, no banner, no state file": Case(
        lambda w, taken: ["sandbox", "stripe", "--port", str(taken), "--state", str(w / "s.json")],
        2,
        "cannot listen",
    ),
    "up: tampered skill in PROVELY_CONTRACT_PATHS, before any worker": Case(
        lambda _w, _t: ["up", "--port", str(free_port())],
        2,
        "contracts cannot be loaded",
        env=_tampered_skill,
    ),
    "up: data dir that cannot be made": Case(
        lambda _w, _t: ["up", "--port", str(free_port()), "--data-dir", "/proc/nope"],
        2,
        "cannot use the data directory /proc/nope",
    ),
    "up: a secret key that is not a Fernet key, before any worker": Case(
        lambda _w, _t: ["up", "--port", str(free_port())],
        2,
        "PROVELY_SECRET_KEY",
        env=lambda _w: {"PROVELY_SECRET_KEY": "nope"},
        leaves_nothing=False,  # the data directory was checked (made) before the keys
    ),
    "up: a receipt key file that does not exist, before any worker": Case(
        lambda w, _t: ["up", "--port", str(free_port()), "--data-dir", str(w.parent / "d")],
        2,
        "PROVELY_RECEIPT_KEY_FILE: cannot read receipt key file",
        env=lambda w: {"PROVELY_RECEIPT_KEY_FILE": str(w / "none.pem")},
    ),
    "up: database unreachable, before any worker": Case(
        lambda w, _t: ["up", "--port", str(free_port()), "--data-dir", str(w.parent / "d")],
        2,
        "cannot reach the database postgresql+psycopg://postgres@127.0.0.1:",
        env=lambda _w: {
            "PROVELY_DATABASE_URL": (
                f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/x?connect_timeout=5"
            )
        },
    ),
    "up: negative sweeper interval": Case(
        lambda _w, _t: ["up", "--port", str(free_port())],
        2,
        "PROVELY_SWEEPER_INTERVAL_SECONDS",
        env=lambda _w: {"PROVELY_SWEEPER_INTERVAL_SECONDS": "-1"},
    ),
    "config show: unknown log level": Case(
        lambda _w, _t: ["config", "show"],
        2,
        "PROVELY_LOG_LEVEL",
        env=lambda _w: {"PROVELY_LOG_LEVEL": "LOUD"},
    ),
    "serve sweeper: unknown log level": Case(
        lambda _w, _t: ["serve", "sweeper"],
        2,
        "PROVELY_LOG_LEVEL",
        env=lambda _w: {"PROVELY_LOG_LEVEL": "LOUD"},
    ),
    "serve sweeper: zero action window": Case(
        lambda _w, _t: ["serve", "sweeper"],
        2,
        "PROVELY_ACTION_WINDOW_SECONDS",
        env=lambda _w: {"PROVELY_ACTION_WINDOW_SECONDS": "0"},
    ),
    "db upgrade: database unreachable": Case(
        lambda _w, _t: [
            "db",
            "upgrade",
            "--url",
            f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/nothing?connect_timeout=5",
        ],
        2,
        "cannot migrate",
    ),
    "db current: no system, none created": Case(
        lambda _w, _t: ["db", "current"], 2, "no Provely system here", env=_missing_system
    ),
    "receipts keys: no system, none created": Case(
        lambda _w, _t: ["receipts", "keys"], 2, "no Provely system here", env=_missing_system
    ),
    "workspace create: no system, the hint names it": Case(
        lambda _w, _t: ["workspace", "create", "acme"],
        2,
        "no Provely system here",
        env=_missing_system,
    ),
    "operations list: no system": Case(
        lambda _w, _t: ["operations", "list"], 2, "no Provely system here", env=_missing_system
    ),
    "audit verify: no system": Case(
        lambda _w, _t: ["audit", "verify", "--all"],
        2,
        "no Provely system here",
        env=_missing_system,
    ),
    "skills sign: missing key file": Case(
        lambda w, _t: ["skills", "sign", str(w), "--key", str(w / "missing.pem")],
        2,
        "cannot read the key",
    ),
    "contracts lint: a file that does not exist": Case(
        lambda w, _t: ["contracts", "lint", str(w / "nothing.yaml")], 2, ""
    ),
}


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


@pytest.mark.parametrize("name", list(CASES))
def test_each_command_keeps_the_exit_code_rule(name: str, tmp_path: Path, taken_port: int) -> None:
    case = CASES[name]
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")}
    env.update(case.env(work))
    run = subprocess.run(
        provely_argv(*case.argv(work, taken_port)),
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == case.code, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr  # one line: no banner first, no traceback after
    assert case.says in lines[0]
    assert lines[0].startswith("error:") or not case.says
    if case.leaves_nothing:
        assert sorted(p.name for p in work.iterdir()) == []
