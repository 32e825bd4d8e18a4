"""The webhook intake behind the signature check: parse a delivery, store each event once,
correlate stored events with their operations, and name the operations to wake.

Modules (each imports only those above it in this list):

- ``parse``      ``parse_event``: a verified body read by the skill's event shape (or
                 ``MalformedEvent``)
- ``contracts``  what the intake reads of the registry: event shapes, an operation's contract,
                 a contract's providers, a provider's fingerprint key names
- ``rules``      the correlation rules, once for every path: an operation's keys, ``match`` of an
                 event and an operation (strategy, strong or weak, learning the subject)
- ``results``    ``Delivery``, ``Link``, ``IntakeResult`` (which links wake, which are late)
- ``store``      ``store_event`` / ``store_many``: each event once, with its keys, into the backlog
- ``refusals``   ``record_refusals``: a refused delivery's metadata (never its body)
- ``ignored``    ``name_ignored``: new links whose event is older than its operation
                 (``count_ignored`` counts them after commit)
- ``settle``     after the links: wakes, rechecks of watched operations, what is ignored, out of
                 the backlog
- ``correlate``  one event at a time (``correlate_event``), one operation at a time
                 (``correlate_pending_events``), and ``lock_correlation`` that orders the two
- ``batch``      ``correlate_stored``: a set of stored events at once (set-based on PostgreSQL)
- ``ingest``     ``ingest_event``: store, correlate and settle one delivery
- ``backlog``    ``correlate_backlog``: claim the events nobody has correlated yet, correlate them
- ``correlator`` ``correlate_pending``: what the ``provely.correlate`` task and the sweeper run
- ``endpoint_versions`` the provider's webhook endpoints for a workspace and the API version
                 each sends
- ``connection_check`` will what a provider sends count? (``provely connection check``)

Errors: ``MalformedEvent`` (``parse``, a ValueError with a ``reason``) — a verified body that is
not an event of the expected shape: refused with a 400 and stored nowhere. ``NoConnection``
(``connection_check``, a LookupError) and ``ProviderUnreadable`` (``endpoint_versions``) — a
connection check that cannot run.

May import: every other package of ``shared`` and libraries; nothing in ``shared`` imports it.
"""
