"""``provely connection set`` refuses link-local and metadata base URLs unless the operator
passes ``--allow-private-network`` (or ``PROVELY_ALLOW_PRIVATE_NETWORK``); the embedded
default creates its data directory 0700 and its files 0600."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

pytestmark = pytest.mark.integration

PROVELY = str(Path(sys.executable).parent / "provely")


def run(env: dict[str, str], *args: str, expect: int = 0) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [PROVELY, *args], env=env, capture_output=True, text=True, timeout=120, umask=0o022
    )
    assert done.returncode == expect, (args, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    return done


def env_for(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")}
    env.update({"PROVELY_DATA_DIR": str(data_dir), "PROVELY_LOG_JSON": "false", **extra})
    return env


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], str]:
    data = tmp_path_factory.mktemp("net") / "data"
    env = env_for(data, PROVELY_SECRET_KEY=Fernet.generate_key().decode())
    run(env, "db", "upgrade")
    import json

    ws = json.loads(run(env, "workspace", "create", "acme").stdout)["workspace_id"]
    return env, ws


def connect(env: dict[str, str], ws: str, url: str, *flags: str, expect: int = 0) -> str:
    done = run(
        env, "connection", "set", "--workspace", ws, "--provider", "stripe",
        "--webhook-secret", "whsec_x", "--api-key", "sk_test_x", "--base-url", url, *flags,
        expect=expect,
    )  # fmt: skip
    return done.stderr if expect else done.stdout


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254",
        "http://[fe80::1]:8080",
        "http://100.100.100.200",
        "http://metadata.google.internal",
        "http://[fd00:ec2::254]",
        "http://2852039166",
    ],
)
def test_metadata_and_link_local_base_urls_need_the_operator_s_word(
    workspace: tuple[dict[str, str], str], url: str
) -> None:
    env, ws = workspace
    refused = connect(env, ws, url, expect=1)
    assert "--allow-private-network" in refused
    assert len(refused.strip().splitlines()) == 1
    assert url.split("//")[1].split(":")[0].strip("[]") in refused or "metadata" in refused
    assert '"base_url"' in connect(env, ws, url, "--allow-private-network")
    allowed_env = {**env, "PROVELY_ALLOW_PRIVATE_NETWORK": "true"}
    assert '"base_url"' in connect(allowed_env, ws, url)


def test_loopback_and_private_base_urls_stay_allowed(
    workspace: tuple[dict[str, str], str],
) -> None:
    env, ws = workspace
    for url in ("http://127.0.0.1:12111", "http://10.0.0.7", "https://api.stripe.com"):
        assert '"base_url"' in connect(env, ws, url)


def test_the_embedded_data_dir_is_0700_and_its_files_0600(tmp_path: Path) -> None:
    data = tmp_path / "fresh" / "data"
    env = env_for(data)  # no secret key: the embedded default generates one in the data dir
    run(env, "db", "upgrade")
    run(env, "workspace", "create", "acme")
    from shared.runtime.celery_app import prepare_embedded_broker
    from shared.runtime.settings import Settings

    settings = Settings(data_dir=data)
    old = os.umask(0o022)
    try:
        # The broker file of the embedded default, made when the broker is first used (not
        # when the Celery app is configured: test_importing_the_celery_app_creates_nothing).
        prepare_embedded_broker(settings.resolved_broker_url())
    finally:
        os.umask(old)
    assert mode(data) == 0o700
    files = sorted(p.name for p in data.iterdir())
    assert "provely.db" in files
    assert "broker.db" in files
    assert any("key" in name for name in files), files
    for path in data.iterdir():
        assert mode(path) == 0o600, (path.name, oct(mode(path)))


def test_importing_the_celery_app_creates_nothing(tmp_path: Path) -> None:
    """Every process that imports the Celery app configured it with the default settings, and
    that made the default data directory where it ran (`provely demo` in /tmp left a
    /tmp/.provely that every command below /tmp then took for its system)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")}
    env["PROVELY_DATA_DIR"] = str(tmp_path / "never")
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import shared.runtime.celery_app as c; print(c.app.conf.broker_url)",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert str(tmp_path / "never" / "broker.db") in done.stdout
    assert not (tmp_path / "never").exists()
