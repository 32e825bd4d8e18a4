"""What Provely trusts and how it checks it: webhook signatures, signed skills, the contract
registry, secrets at rest, the hosts a connection may name.

Modules:

- ``signatures`` one verifier (and a signing fake) per provider's webhook signature scheme
- ``skills``     Ed25519 publisher keys; signing a skill directory and verifying it at load
- ``registry``   every contract the runtime may use, loaded from verified skills, linted
- ``secrets``    Fernet encryption of connection secrets (key rotation); API key hashes
- ``passwords``  console users' generated passwords and their salted scrypt hashes
- ``webhook_secrets`` a connection's signing secrets with the time each stops verifying
- ``addresses``  base URLs a connection may not name (metadata services, link-local)

Errors (each raised on purpose, by the module named)::

    SignatureError            (signatures) a delivery whose signature does not hold
    UnknownSchemeError        (signatures) a connection names no known scheme; a ValueError
    SkillError                (skills)     a key or manifest that cannot be used at all
    RegistryError             (registry)   contracts could not be loaded; one line per problem
    └── ContractNotFoundError (registry)   no such contract or version; also a LookupError
    SecretError               (secrets)
    ├── SecretKeyMissing                   no usable ``PROVELY_SECRET_KEY``
    └── UndecryptableSecret                a ciphertext no configured key opens

May import: ``shared.runtime``, ``shared.core`` and libraries; never the record
(``shared.db``), the intake or the lifecycle: trust is decided before anything is stored.
"""
