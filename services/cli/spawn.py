"""How a ``provely`` child process is started: the argv that runs the CLI with this interpreter
(the child stops itself when its parent goes away), and a free port to give it."""

from __future__ import annotations

import socket
import sys

__all__ = ["free_port", "provely_argv"]

# Runs the ``provely`` CLI in a child that stops itself (SIGTERM, so gracefully) when its
# parent goes away: a watcher thread compares the parent pid once a second. (The kernel's
# parent-death signal would follow the *thread* that spawned the child, not the process.)
_BOOTSTRAP = (
    "import os, signal, sys, threading, time\n"
    "_parent = os.getppid()\n"
    "def _watch():\n"
    "    while os.getppid() == _parent:\n"
    "        time.sleep(1.0)\n"
    "    os.kill(os.getpid(), signal.SIGTERM)\n"
    "threading.Thread(target=_watch, name='parent-watch', daemon=True).start()\n"
    "sys.argv[0] = 'provely'\n"
    "from services.cli.main import main\n"
    "main()\n"
)


def provely_argv(*args: str) -> list[str]:
    """The argv that runs ``provely ARGS…`` with this interpreter (no PATH lookup needed)."""
    return [sys.executable, "-c", _BOOTSTRAP, *args]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free right now on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
