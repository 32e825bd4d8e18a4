"""The parts of ``bench/ingest.py``, the webhook intake benchmark (the script keeps the bare
endpoint it measures against, the command line and the runs and their report).

- ``scratch``: the scratch database, seeded with a workspace and its open operations, vacuumed
  between runs;
- ``bodies``: the signed deliveries ``wrk`` sends, a file per thread;
- ``wrk``: the load tool, its Lua script and its figures;
- ``servers``: the uvicorn servers, started and waited for;
- ``rows``: what the database says of a run (events, correlations, wakes, WAL, the backlog),
  and one intake run's figures;
- ``cpu``: the CPU each process tree used, read from ``/proc``;
- ``observers``: stand-in observers that claim every woken fence.

Each imports only those listed before it; nothing imports the script (``uvicorn ingest:bare_app``
imports it in the bare endpoint's server).
"""
