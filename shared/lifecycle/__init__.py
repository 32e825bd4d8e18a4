"""An operation's life in the record: state changes, the observation schedule, the watch after
VERIFIED, receipts and their signing keys.

Modules:

- ``operations``     the one place that changes an operation's state (``change_state``)
- ``scheduling``     fences, due times, wake-ups, and the ``observe`` messages sent after commit
- ``watch``          the watch after VERIFIED: watch keys, rechecks, ended watches
- ``receipts``       issuing, superseding, serving and checking signed receipts
- ``receipt_keys``   Ed25519 receipt keys: rotation and the public key ring
- ``contract_cache`` an operation's contract, memoised per worker process
- ``warmup``         a worker's preload and warm-up before its first task

May import: ``shared.evidence``, ``shared.db``, ``shared.trust``, ``shared.runtime``,
``shared.core`` and libraries; never the intake.
"""
