"""An operation's life in the record: state changes, the observation schedule and the messages
that wake the workers, the watch after VERIFIED, receipts and their signing keys.

Modules:

- ``steps``            every state change, named (``apply_decision`` …), and its receipt
- ``operations``       the one write of a state (``change_state``, called by the steps only)
- ``contracts``        the contract an operation is bound to; contract look-ups; provider skills
- ``contract_cache``   an operation's contract, memoised per worker process
- ``connections``      a workspace's provider connections: set, rotate webhook secrets, show
- ``scheduling``       fences, due times, wake-ups (every fence is written here)
- ``messages``         every message to the queues, typed, sent as keywords after commit
- ``watch``            the watch after VERIFIED: watch keys and events that name them
- ``late_evidence``    rechecks of a watched VERIFIED operation; a late contradiction
- ``receipts``         issuing (and superseding) and serving signed receipts
- ``receipt_evidence`` what a receipt cites: conditions, correlation, evidence
- ``receipt_keys``     the receipt signing key in the record: storage and rotation
- ``receipt_keyring``  key ids, signatures, key files and the public key ring
- ``receipt_check``    checking a receipt document offline
- ``review``           a person's review: recorded once, answered with a signed receipt; the queue
- ``warmup``           a worker's preload and warm-up before its first task

Within the package imports point one way: ``review`` → ``late_evidence`` → ``steps`` →
``operations`` → ``receipts`` → ``receipt_evidence``, ``receipt_keys`` → ``receipt_keyring``;
``late_evidence`` → ``messages`` → ``scheduling`` → ``watch``; ``contracts`` is below them all.

Errors (each raised on purpose, by the module named)::

    LookupError
    └── ContractNotFound      (contracts)       no such contract or version for the workspace
        └── ContractMismatch  (contracts)       the contract no longer has the operation's hash
    ReceiptError              (receipts)
    └── ReceiptNotIssuable    (receipts)        the operation is open or has no final verdict
    ReceiptKeyError           (receipt_keyring) a signing key that cannot be loaded or used
    KeyRingError              (receipt_keyring) a published key list that cannot be read
    ScheduleConflict          (scheduling)      the fence moved since it was read
    ReviewRefused             (review)          the operation is not reviewable now

May import: ``shared.evidence``, ``shared.db``, ``shared.trust``, ``shared.runtime``,
``shared.core`` and libraries; never the intake.
"""
