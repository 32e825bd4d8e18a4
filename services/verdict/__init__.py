"""The verdict service: the worker that decides (queue ``verdict``) and the sweeper.

It owns turning observations into a decision — loading an operation, its contract and its
evidence, calling the pure engine (``shared.core.engine.decide``) and applying the result
through ``shared.lifecycle`` — and the sweeper, which keeps operations moving when a message
is lost (due observations, overdue deadlines, the bounded records).

Modules: ``evaluate`` (``evaluate(operation_id)``: decide and schedule what comes next),
``tasks`` (the Celery adapter ``provely.evaluate``), ``sweeper`` (several may run at once).

Errors: ``LostRace`` (``evaluate``, a RuntimeError) — another writer changed the operation
first: the operation is read again and decided again, never written over.

May import: ``shared`` and its libraries (SQLAlchemy, Celery); never another service.
"""
