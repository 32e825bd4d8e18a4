"""The webhook intake behind the signature check: parse a delivery, store each event once,
correlate stored events with their operations, and name the operations to wake.

Modules:

- ``store``      parse, store once, correlate, backlog (split by concern below)
- ``correlator`` ``correlate_pending``: what the ``provely.correlate`` task and the sweeper run

May import: every other package of ``shared`` and libraries; nothing in ``shared`` imports it.
"""
