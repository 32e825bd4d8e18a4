"""Runtime plumbing every process shares: settings, the data directory's files, the Celery
application, logs and metrics, provider rate limits.

Modules:

- ``settings``     every ``PROVELY_*`` knob (pydantic-settings), read once per process
- ``datafiles``    the embedded default's data directory and its owner-only files
- ``queues``       the names of the tasks and queues, the bounds of a message (no Celery app)
- ``celery_app``   the Celery application: queues, broker settings, the ``send`` transport
- ``logs``         structlog: one JSON line per log record, the operation id bound to it
- ``metrics``      the Prometheus metrics of every service, and where they are served
- ``celery_hooks`` a task's context in its logs, its queue lag and outcome in the metrics
- ``ratelimit``    one token bucket per provider connection, for readbacks
- ``bounded``      a bounded, thread-safe map of what a process computed (least recent out)

Errors: none of its own (a bad ``PROVELY_*`` value is pydantic's ``ValidationError``, turned
into one line per problem by ``settings.settings_problems``).

May import: ``shared.core`` and libraries. Knows nothing of the record (``shared.db``) or of
operations: a collector that needs a database figure is handed a function that reads it.
"""
