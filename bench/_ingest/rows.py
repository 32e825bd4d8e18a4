"""What the scratch database says of a run: its events, correlations, wakes and backlog, the first
arrival, the WAL written, the wait for the correlator to catch up; and one intake run's figures."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime

from bench._ingest.scratch import libpq_dsn
from bench._ingest.wrk import WrkResult

__all__ = ["IntakeRun", "count_rows", "first_arrival", "wait_correlated", "wal_snapshot"]


@dataclass
class IntakeRun:
    connections: int
    wrk: WrkResult
    before: tuple[int, int, int, int]
    after: tuple[int, int, int, int]
    answered_s: float
    drain_s: float
    window_s: float  # from the first new event's arrival until the correlator caught up
    cpu: dict[str, float]  # CPU seconds from the start of the run until caught up
    wal: tuple[int, int, int] | None  # WAL bytes, full-page images, checkpoints begun

    @property
    def new_events(self) -> int:
        return self.after[0] - self.before[0]

    @property
    def processed(self) -> float:
        """Events stored, correlated and woken per second, from the first one's arrival until
        the correlator caught up (not from wrk's start: its threads load their bodies first)."""
        return self.new_events / self.window_s


def count_rows(url: str) -> tuple[int, int, int, int]:
    """Events, correlations, wakes and events not yet correlated, in one statement."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.connect() as conn:
        events, links, wakes, waiting = conn.execute(
            text(
                "SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM operation_events), "
                "(SELECT coalesce(sum(fence - 1), 0) FROM operations), "
                "(SELECT count(*) FROM event_backlog)"
            )
        ).one()
    engine.dispose()
    return int(events), int(links), int(wakes), int(waiting)


def first_arrival(url: str, since: datetime) -> datetime:
    """When the intake received the first event after ``since`` (its ``received_at``: this
    machine's clock, as the bench's)."""
    import psycopg

    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        row = conn.execute(
            "SELECT min(received_at) FROM events WHERE received_at >= %s", (since,)
        ).fetchone()
    if row is None or not isinstance(row[0], datetime):
        raise SystemExit("no event arrived during the run")
    return row[0]


def wal_snapshot(url: str) -> tuple[int, int, int] | None:
    """WAL bytes and full-page images written so far, and checkpoints begun (the server's
    counters: PostgreSQL 14 to 16); None where the server has no such views."""
    import psycopg

    try:
        with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
            row = conn.execute(
                "SELECT wal_bytes::bigint, wal_fpi, "
                "(SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter) "
                "FROM pg_stat_wal"
            ).fetchone()
    except psycopg.Error:
        return None
    return None if row is None else (int(row[0]), int(row[1]), int(row[2]))


def wait_correlated(url: str, timeout_s: float = 300.0) -> float:
    """Poll until no event waits for correlation; the seconds it took. One connection, and a
    probe that reads one index entry at most: the wait must not load the database it waits for
    (it used to count the rows of four tables each 50 ms, on a new connection each time)."""
    import psycopg

    started = time.monotonic()
    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        while conn.execute("SELECT EXISTS (SELECT 1 FROM event_backlog)").fetchone() == (True,):
            if time.monotonic() - started > timeout_s:
                raise SystemExit("the correlator did not catch up")
            time.sleep(0.05)
    return time.monotonic() - started
