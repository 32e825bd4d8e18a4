"""The observer: the worker that reads a provider back (queue ``observe``).

It owns the ``http`` verifier — reading a resource or a paged list from the provider with the
workspace's connection — and the observation rows it writes for one operation and one fence,
then wakes the verdict service. It never decides a verdict.

Modules: ``connections`` (the workspace's connection to a provider), ``jobs`` (what one http
channel reads), ``http_verifier`` (the read itself, evidence level E2), ``statements`` (what
it reads and writes of the record), ``observe`` (one operation, every channel, one fence),
``tasks`` (the Celery adapters ``provely.observe`` and its batch form).

Errors: ``ConnectionMissing`` (``connections``, a LookupError) — ``readback_for`` found no
connection of the workspace for the contract's provider. What a provider answers (an outage, a
refusal, a missing resource) is not an exception here: it is recorded as the observation's
status, and the verdict service decides what it means.

May import: ``shared`` and its libraries (httpx, SQLAlchemy, Celery); never another service.
"""
