"""The parts of ``bench/pipeline.py``, the observe → evaluate benchmark (the script keeps the bare
round trip's two hops, which its Celery workers load with ``-A bench.pipeline``, the command line,
the measurements and their row).

- ``provider``: the loopback refund API the observers read;
- ``workers``: the Celery worker processes (and the sweeper), started, stopped and measured;
- ``operations``: the tenants and operations written for a measurement, and the count of those
  decided.

None imports another, nor the script.
"""
