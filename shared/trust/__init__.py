"""What Provely trusts and how it checks it: webhook signatures, signed skills, the contract
registry, secrets at rest, the hosts a connection may name.

Modules:

- ``signatures`` one verifier (and a signing fake) per provider's webhook signature scheme
- ``skills``     Ed25519 publisher keys; signing a skill directory and verifying it at load
- ``registry``   every contract the runtime may use, loaded from verified skills, linted
- ``secrets``    Fernet encryption of connection secrets (key rotation); API key hashes
- ``addresses``  base URLs a connection may not name (metadata services, link-local)

May import: ``shared.runtime``, ``shared.core`` and libraries; never the record
(``shared.db``), the intake or the lifecycle: trust is decided before anything is stored.
"""
