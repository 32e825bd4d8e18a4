"""Private Redis and PostgreSQL servers for the tests and benchmarks that break them.

A test that kills, restarts or flushes a broker or a database must never touch the shared ones
(Redis on 6379, PostgreSQL on 5432): it starts its own here, on a free loopback port, in a
temporary directory, and stops it by its pid. Both restart on the same port and directory, so
the system under test reconnects to "the same" server:

- :class:`PrivateRedis`: ``kill9`` then ``start`` is a crash and a restart (no persistence, so
  everything it held is gone, as after a restart of a Redis without a disk); ``flushall``.
- :class:`PrivatePostgres`: ``initdb`` once, then ``pg_ctl`` (``stop -m immediate`` is a crash,
  the next start recovers from the WAL). PostgreSQL refuses to run as root: as root the
  cluster belongs to the ``postgres`` user and its commands run through ``runuser``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["PrivatePostgres", "PrivateRedis", "free_port"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_port(port: int, *, up: bool, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                if up:
                    return
        except OSError:
            if not up:
                return
        time.sleep(0.05)
    raise RuntimeError(f"port {port} did not go {'up' if up else 'down'} in {timeout_s:.0f} s")


class PrivateRedis:
    """A ``redis-server`` of the caller's own on a free port (no persistence)."""

    def __init__(self, directory: Path | None = None) -> None:
        self.port = free_port()
        self.directory = directory or Path(tempfile.mkdtemp(prefix="provely-redis-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        self.process: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        log = (self.directory / "redis.log").open("ab")
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(self.directory)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        log.close()
        _wait_port(self.port, up=True)

    def kill9(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        _wait_port(self.port, up=False)

    def restart(self, down_s: float = 0.5) -> None:
        """A crash (SIGKILL) and a start on the same port, ``down_s`` later."""
        self.kill9()
        time.sleep(down_s)
        self.start()
        self.restarts += 1

    def flushall(self) -> None:
        import redis

        with redis.Redis(port=self.port) as client:
            client.flushall()

    def stop(self) -> None:
        self.kill9()
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> PrivateRedis:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if found:
        return found[-1]
    path = shutil.which(name)
    if path is None:
        raise RuntimeError(f"{name} not found (install PostgreSQL's server binaries)")
    return path


class PrivatePostgres:
    """A PostgreSQL cluster of the caller's own (trust auth on loopback, a free port)."""

    USER = "postgres"

    def __init__(self, directory: Path | None = None) -> None:
        self.port = free_port()
        self.directory = directory or Path(tempfile.mkdtemp(prefix="provely-pg-"))
        self.data = self.directory / "data"
        self.restarts = 0
        self._as_root = os.geteuid() == 0

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://{self.USER}@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str) -> None:
        command = list(argv)
        if self._as_root:
            command = ["runuser", "-u", self.USER, "--", *command]
        subprocess.run(command, check=True, capture_output=True, cwd=self.directory)

    def init(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._as_root:
            shutil.chown(self.directory, self.USER)
            os.chmod(self.directory, 0o700)
        self._run(
            _pg_bin("initdb"), "-D", str(self.data), "-U", self.USER, "--auth=trust",
            "--no-sync", "-E", "UTF8",
        )  # fmt: skip

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c max_connections=200"
        )
        self._run(
            _pg_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.directory / "pg.log"),
            "-o", options, "-w", "-t", "60", "start",
        )  # fmt: skip
        _wait_port(self.port, up=True)

    def crash(self) -> None:
        """``pg_ctl stop -m immediate``: every backend dies, the next start runs recovery."""
        self._run(_pg_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        _wait_port(self.port, up=False)

    def restart(self, down_s: float = 1.0) -> None:
        self.crash()
        time.sleep(down_s)
        self.start()
        self.restarts += 1

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(subprocess.CalledProcessError):
                self._run(_pg_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> PrivatePostgres:
        self.init()
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
