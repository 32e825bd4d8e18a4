"""The ``--state`` file: read at start, written atomically (temp file, fsync, rename) on change."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from services.sandbox.errors import StateFileError
from services.sandbox.model import Sandbox

__all__ = ["load_state", "save_state"]


def load_state(sandbox: Sandbox, path: Path) -> bool:
    """Load ``path`` into ``sandbox``; False when the file does not exist yet."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StateFileError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StateFileError(f"{path} is not JSON: {exc.msg} (line {exc.lineno})") from exc
    try:
        sandbox.load(data)
    except StateFileError as exc:
        raise StateFileError(f"{path}: {exc}") from exc
    return True


def save_state(sandbox: Sandbox, path: Path) -> None:
    """Write the state to ``path``: a reader sees the old file or the new one, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(sandbox.dump(), handle, separators=(",", ":"))
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)  # the rename itself survives a crash
        finally:
            os.close(directory)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
