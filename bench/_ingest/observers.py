"""Stand-in observers: a thread of the bench that claims every woken fence, as observers beginning
each reading within the interval would, and reads nothing."""

from __future__ import annotations

import threading

from bench._ingest.scratch import libpq_dsn

__all__ = ["StandInObservers"]


class StandInObservers(threading.Thread):
    """Observers that begin to read every woken operation within ``interval_s``: they claim its
    fence (``reading_fence = fence``, rows locked in id order as the correlator locks them) and
    read nothing. Each claim lets the next event of that operation wake it again."""

    def __init__(self, url: str, interval_s: float) -> None:
        super().__init__(daemon=True)
        self.dsn = libpq_dsn(url)
        self.interval_s = interval_s
        self.claims = 0
        self.done = threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.done.wait(self.interval_s):
                cursor = conn.execute(
                    "WITH woken AS (SELECT id FROM operations "
                    "WHERE reading_fence IS DISTINCT FROM fence ORDER BY id FOR NO KEY UPDATE) "
                    "UPDATE operations o SET reading_fence = o.fence "
                    "FROM woken WHERE o.id = woken.id"
                )
                self.claims += cursor.rowcount

    def stop(self) -> None:
        self.done.set()
        self.join()
