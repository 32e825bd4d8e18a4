"""The parts of ``bench/worlds.py``, the randomized stress worlds (the script keeps the command
line and the run of many worlds over lanes).

- ``bounds``: what every world does and the bounds it is held to (``LOST_BOUND_S``, ``STABLE_S``,
  ``SUPERSEDE_BOUND_S`` …);
- ``harness``: the harness's own failures (:class:`HarnessError`) and its retried requests;
- ``plan``: a world's draws (:class:`Plan`, :func:`draw_plan`);
- ``relay``: sandbox deliveries forwarded to the intake, each 200 timed;
- ``lanes``: a sandbox and a workspace each, one world at a time;
- ``watch``: the polls of the operation;
- ``outcome``: what one world measured, and the final states its truth allows;
- ``judge``: judging a played world against the truth, and its timeline;
- ``play``: playing one world's plan on its lane (a ``judge.Judgement``, which judges it after);
- ``summary``: the figures of many worlds and their printing.

Each imports only those listed before it; nothing imports the script.
"""
