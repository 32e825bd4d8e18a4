"""A real install: the built wheel, in a fresh venv outside the checkout, on every supported
Python, runs ``provely contracts list``, ``provely demo`` and ``provely up`` from another
directory. The shipped contracts and keys come from the installed package, not the checkout.

Each supported Python that is not installed is skipped here (CI fails on it: ``CI=true``).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import httpx
import pytest

from services.cli.spawn import free_port

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SUPPORTED = ("3.11", "3.12", "3.13")


def _python(minor: str) -> str | None:
    """An interpreter of ``minor`` that runs: this one, pyenv's newest, or ``pythonX.Y`` on the
    PATH (a pyenv shim of a version not selected is on the PATH but does not run)."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == minor:
        return sys.executable
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates = [str(p) for p in sorted(pyenv.glob(f"{minor}.*/bin/python"), reverse=True)]
    candidates.append(shutil.which(f"python{minor}") or "")
    for candidate in filter(None, candidates):
        probe = subprocess.run([candidate, "--version"], capture_output=True, check=False)
        if probe.returncode == 0:
            return candidate
    return None


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [
            sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist),
            str(ROOT), str(ROOT / "sdk" / "python"),
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )  # fmt: skip
    # Provely and its Python SDK (`provely mcp` calls the API through it).
    assert len(list(dist.glob("provely-*.whl"))) == 1
    assert len(list(dist.glob("provely_sdk-*.whl"))) == 1
    return dist


def _clean_env(venv: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PROVELY_", "PYTHON", "VIRTUAL_ENV"))
    }
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '')}"
    return env


@pytest.mark.parametrize("minor", SUPPORTED)
def test_the_wheel_installs_and_runs_from_any_directory(
    minor: str, wheels: Path, tmp_path: Path
) -> None:
    python = _python(minor)
    if python is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"Python {minor} is supported but not installed")
        pytest.skip(f"Python {minor} is not installed")
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True, timeout=120)
    env = _clean_env(venv)
    install = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            *map(str, wheels.glob("*.whl")),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    elsewhere = tmp_path / "elsewhere"
    # The system of this directory tree: `up` finds it as git finds a repository (whatever
    # `.provely/` a parent directory of the test's may hold).
    (elsewhere / ".provely").mkdir(parents=True)
    provely = str(venv / "bin" / "provely")

    def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [provely, *args],
            cwd=elsewhere,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    version = run("--version")
    assert version.returncode == 0, version.stderr
    mcp_server = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import services.mcp_server.server"],
        cwd=elsewhere,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert mcp_server.returncode == 0, mcp_server.stderr[-2000:]  # `provely mcp` has its SDK
    listed = run("contracts", "list")
    assert listed.returncode == 0, listed.stderr
    site = str(venv)
    assert "stripe.refund.succeeded" in listed.stdout
    for line in listed.stdout.splitlines():
        assert line.split("\t")[-1].startswith(site), line  # the installed package's files
    assert "community" in listed.stdout  # the shipped skill verifies with the shipped keys

    demo = run("demo")
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]

    port = free_port()
    log = (tmp_path / "up.log").open("wb")
    up = subprocess.Popen(
        [provely, "up", "--port", str(port)],
        cwd=elsewhere,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        healthy = False
        while time.monotonic() < deadline and up.poll() is None:
            try:
                healthy = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).is_success
            except httpx.HTTPError:
                healthy = False
            if healthy:
                break
            time.sleep(0.5)
        assert healthy, (tmp_path / "up.log").read_text()[-3000:]
        assert (elsewhere / ".provely" / "provely.db").is_file()
        for path in ("/verify/stripe/stripe.refund.succeeded", "/verify/static/receipt.js"):
            page = httpx.get(f"http://127.0.0.1:{port}{path}", timeout=30)
            assert page.status_code == 200, path  # the pages' templates and assets are packaged
        up.send_signal(signal.SIGINT)
        assert up.wait(timeout=60) == 0, (tmp_path / "up.log").read_text()[-3000:]
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
        log.close()


def test_the_wheel_carries_the_pages_templates_and_assets(wheels: Path) -> None:
    (wheel,) = wheels.glob("provely-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    pages = "services/ingress/pages/"
    for name in ("templates/base.html", "templates/terms/retry.html", "static/receipt.js"):
        assert pages + name in names
