"""The CPU each process used: process trees read from ``/proc`` (the exited children their parents
waited for included), all of PostgreSQL, the load tool and this process."""

from __future__ import annotations

import os
import resource
from pathlib import Path

__all__ = ["cpu_delta", "cpu_snapshot"]


_TICK = os.sysconf("SC_CLK_TCK")


_Stat = tuple[str, list[str]]


def _stat(pid: int) -> _Stat | None:
    """A process's command name and the fields of its ``stat`` after it (from the state on)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone meanwhile
        return None
    return text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()


def _tree_cpu(root: int, stats: dict[int, _Stat]) -> float:
    """CPU seconds of a process and its descendants, those that exited and were waited for
    included (the parent's children counters)."""
    children: dict[int, list[int]] = {}
    for pid, (_, fields) in stats.items():
        children.setdefault(int(fields[1]), []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:  # utime, stime, cutime, cstime
            total += sum(int(f) for f in stats[pid][1][11:15]) / _TICK
        todo.extend(children.get(pid, ()))
    return total


def cpu_snapshot(processes: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of each named process tree, of PostgreSQL (all its processes: the
    postmaster counts the backends that exited), of the load tool (this process's waited-for
    children: ``wrk``) and of this process (stand-in observers, polls)."""
    stats = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (found := _stat(int(entry.name))) is not None:
            stats[int(entry.name)] = found
    snapshot = {name: _tree_cpu(pid, stats) for name, pid in processes.items()}
    postmasters = [
        pid
        for pid, (comm, fields) in stats.items()
        if comm == "postgres" and stats.get(int(fields[1]), ("", []))[0] != "postgres"
    ]
    snapshot["PostgreSQL"] = sum(_tree_cpu(pid, stats) for pid in postmasters)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    snapshot["wrk"] = children.ru_utime + children.ru_stime
    own = resource.getrusage(resource.RUSAGE_SELF)
    snapshot["bench"] = own.ru_utime + own.ru_stime
    return snapshot


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before[name] for name in after}
