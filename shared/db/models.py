"""SQLAlchemy 2 models: the record. PostgreSQL (psycopg 3) in production, SQLite embedded.

Every table that a tenant owns carries ``workspace_id``; queries always filter on it.
Observations, transitions and events are append-only. Final states are written once, fenced by
``operations.version``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "ApiKey",
    "Base",
    "Connection",
    "ConsoleSession",
    "ConsoleSignIn",
    "ConsoleUser",
    "CustomContract",
    "Event",
    "EventBacklog",
    "EventKey",
    "Observation",
    "Operation",
    "OperationEvent",
    "Receipt",
    "ReceiptKey",
    "RefusedDelivery",
    "Transition",
    "UtcDateTime",
    "WatchKey",
    "Workspace",
]

GENESIS_HASH = "0" * 64
"""The ``prev_hash`` of a workspace's first transition."""

# BIGINT autoincrement on PostgreSQL, INTEGER (rowid) on SQLite.
BigId = BigInteger().with_variant(Integer(), "sqlite")
Json = JSON()


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend.

    PostgreSQL stores ``timestamptz``; SQLite keeps no zone, so values are written as naive UTC
    and read back as aware UTC. A naive value handed in is refused: it is always a bug.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime; pass an aware UTC datetime")
        value = value.astimezone(UTC)
        if dialect.name == "sqlite":
            return value.replace(tzinfo=None)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class Base(DeclarativeBase):
    # Named constraints, so SQLite batch migrations can find them again.
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(column_0_label)s",
            "uq": "uq_%(table_name)s_%(column_0_N_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class Workspace(Base):
    __tablename__ = "workspaces"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # ws_…
    name: Mapped[str] = mapped_column(String(200))
    action_window_seconds: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    # The head of the workspace's audit chain (shared.db.audit): the last transition's seq, hash
    # and prev_hash, moved forward by the statement that appends the next one.
    chain_seq: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    chain_hash: Mapped[str] = mapped_column(
        String(64), default=GENESIS_HASH, server_default=GENESIS_HASH
    )
    chain_prev_hash: Mapped[str] = mapped_column(
        String(64), default=GENESIS_HASH, server_default=GENESIS_HASH
    )


class ApiKey(Base):
    """An API key, stored as its sha256 only; the plain key is shown once at creation."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # key_…
    workspace_id: Mapped[str] = mapped_column(ForeignKey("workspaces.id"), index=True)
    prefix: Mapped[str] = mapped_column(String(16))  # the first characters, for display
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    scopes: Mapped[str] = mapped_column(String(100), default="agent")  # "agent" | "admin,agent"
    name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    # The last request made with it, at most a minute stale (``tenants.authenticate``).
    last_used_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)


class Connection(Base):
    """A workspace's credentials for one provider; secrets are encrypted at rest (Fernet)."""

    __tablename__ = "connections"
    __table_args__ = (UniqueConstraint("workspace_id", "provider"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # conn_…
    workspace_id: Mapped[str] = mapped_column(ForeignKey("workspaces.id"), index=True)
    provider: Mapped[str] = mapped_column(String(64))  # "stripe", "http", …
    base_url: Mapped[str] = mapped_column(String(500))
    signature_scheme: Mapped[str] = mapped_column(String(32))  # stripe|standard_webhooks|github
    signature_tolerance_seconds: Mapped[int] = mapped_column(Integer, default=300)
    webhook_secrets_enc: Mapped[bytes] = mapped_column(LargeBinary)  # Fernet(JSON list)
    api_key_enc: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    auth_scheme: Mapped[str] = mapped_column(String(32), default="bearer")  # bearer|header
    auth_header: Mapped[str | None] = mapped_column(String(100), nullable=True)
    rate_limit_per_second: Mapped[float | None] = mapped_column(nullable=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())


class Operation(Base):
    """One attempt at one effect, bound to one contract version for its whole life.

    ``version`` fences every state change (``UPDATE … WHERE version = :v``). ``fence`` is the
    number of the observation currently scheduled; an ``observe`` task carrying another fence
    is stale and dropped. ``next_observation_at`` makes the schedule durable: the sweeper
    re-enqueues what is overdue. ``reading_fence`` is the last fence an observer began to read
    (claimed before its readbacks): a scheduled fence that is not it has not been read yet.
    """

    __tablename__ = "operations"
    __table_args__ = (
        UniqueConstraint("workspace_id", "idempotency_key"),
        Index("ix_operations_ws_created", "workspace_id", "created_at", "id"),
        # The sweeper's scans (migration 0013): what is scheduled, by due time; open
        # operations past their deadline, oldest first.
        Index(
            "ix_operations_scheduled",
            "next_observation_at",
            postgresql_where=text("next_observation_at IS NOT NULL"),
            sqlite_where=text("next_observation_at IS NOT NULL"),
        ),
        Index(
            "ix_operations_open_deadline",
            "deadline",
            postgresql_where=text("final IS false AND deadline IS NOT NULL"),
            sqlite_where=text("final IS false AND deadline IS NOT NULL"),
        ),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # op_…
    workspace_id: Mapped[str] = mapped_column(ForeignKey("workspaces.id"), index=True)
    contract_id: Mapped[str] = mapped_column(String(200))
    contract_version: Mapped[str] = mapped_column(String(40))
    contract_hash: Mapped[str] = mapped_column(String(64))
    completion_level: Mapped[str] = mapped_column(String(40))
    custom_contract_id: Mapped[int | None] = mapped_column(BigId, nullable=True)

    state: Mapped[str] = mapped_column(String(32), index=True)
    verdict: Mapped[str | None] = mapped_column(String(32), nullable=True)
    reason: Mapped[str | None] = mapped_column(String(200), nullable=True)
    verdict_class: Mapped[str | None] = mapped_column(String(100), nullable=True)
    final: Mapped[bool] = mapped_column(Boolean, default=False)
    version: Mapped[int] = mapped_column(Integer, default=1)

    input: Mapped[dict[str, Any]] = mapped_column(Json)
    metadata_: Mapped[dict[str, Any] | None] = mapped_column("metadata", Json, nullable=True)
    idempotency_key: Mapped[str | None] = mapped_column(String(255), nullable=True)
    request_hash: Mapped[str | None] = mapped_column(String(64), nullable=True)

    action_phase: Mapped[str | None] = mapped_column(String(16), nullable=True)
    action_result: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    action_error: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    action_http_status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    action_reported_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    action_deadline: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)

    subject_id: Mapped[str | None] = mapped_column(String(255), nullable=True, index=True)
    learned_keys: Mapped[dict[str, Any]] = mapped_column(Json, default=dict)

    attempts: Mapped[int] = mapped_column(Integer, default=0)  # observations made
    fence: Mapped[int] = mapped_column(Integer, default=0)  # observation number scheduled
    next_observation_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    enqueued_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    reading_fence: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # The due time of the schedule's next slot; a wake leaves it (migration 0009).
    slot_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    deadline: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    # VERIFIED: watched for late evidence until then (migration 0008); rechecks that could
    # not read yet, for their backoff.
    watch_until: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    rechecks: Mapped[int] = mapped_column(Integer, default=0, server_default="0")

    decision: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    decided_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    review: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)

    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime())


class Observation(Base):
    """One reading of one channel for one observation number (append-only)."""

    __tablename__ = "observations"
    __table_args__ = (UniqueConstraint("operation_id", "fence", "channel"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    operation_id: Mapped[str] = mapped_column(ForeignKey("operations.id"), index=True)
    workspace_id: Mapped[str] = mapped_column(String(40))
    # None: a reading a decision took itself (its webhook channels over the events stored at
    # decision time, migration 0008), outside any observation fence.
    fence: Mapped[int | None] = mapped_column(Integer, nullable=True)
    channel: Mapped[str] = mapped_column(String(100))
    status: Mapped[str] = mapped_column(String(16))
    value: Mapped[Any] = mapped_column(Json, nullable=True)
    raw: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    digest: Mapped[str | None] = mapped_column(String(64), nullable=True)  # sha256 of raw
    http_status: Mapped[int | None] = mapped_column(Integer, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    provider_timestamp: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    observed_at: Mapped[datetime] = mapped_column(UtcDateTime())
    latency_ms: Mapped[float | None] = mapped_column(nullable=True)


class Event(Base):
    """A verified provider event, stored once per (workspace, provider, event id)."""

    __tablename__ = "events"
    __table_args__ = (UniqueConstraint("workspace_id", "provider", "event_id"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    workspace_id: Mapped[str] = mapped_column(String(40))
    provider: Mapped[str] = mapped_column(String(64))
    event_id: Mapped[str] = mapped_column(String(255))
    type: Mapped[str] = mapped_column(String(200))
    provider_timestamp: Mapped[datetime] = mapped_column(UtcDateTime())
    api_version: Mapped[str | None] = mapped_column(String(64), nullable=True)
    object_id: Mapped[str | None] = mapped_column(String(255), nullable=True)
    idempotency_key: Mapped[str | None] = mapped_column(String(255), nullable=True)
    body: Mapped[dict[str, Any]] = mapped_column(Json)
    raw: Mapped[bytes] = mapped_column(LargeBinary)
    digest: Mapped[str] = mapped_column(String(64))
    duplicates: Mapped[int] = mapped_column(Integer, default=0)
    received_at: Mapped[datetime] = mapped_column(UtcDateTime())
    # The places of ``body`` escaped to be storable (NUL, a lone surrogate, 1e999, too deep);
    # NULL: ``body`` is the provider's document as sent (``raw`` is verbatim either way).
    escaped: Mapped[list[str] | None] = mapped_column(Json, nullable=True)


class RefusedDelivery(Base):
    """A delivery to a connection that was refused (its signature failed, or its body is not a
    JSON event): what, when and why — never its body (a refused delivery is stored nowhere)."""

    __tablename__ = "refused_deliveries"
    __table_args__ = (Index("ix_refused_deliveries_ws_time", "workspace_id", "received_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    workspace_id: Mapped[str] = mapped_column(String(40))
    provider: Mapped[str] = mapped_column(String(64))
    connection_id: Mapped[str] = mapped_column(String(40))
    reason: Mapped[str] = mapped_column(String(64))
    http_status: Mapped[int] = mapped_column(Integer)
    size: Mapped[int] = mapped_column(Integer)
    received_at: Mapped[datetime] = mapped_column(UtcDateTime())


class EventBacklog(Base):
    """The correlation backlog: a stored event that no correlator has matched with operations
    (and woken them) yet. Its row is inserted with the event and deleted by the correlation, so
    the wide event row itself is written once (small; the sweeper takes what no message
    brought to a worker)."""

    __tablename__ = "event_backlog"

    # No foreign key (as on the other derived rows below): written by the statement that inserts
    # the event, with the id it returns; events are never deleted (migration 0005).
    event_pk: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=False)
    received_at: Mapped[datetime] = mapped_column(UtcDateTime())


class EventKey(Base):
    """The correlation keys an event carries (object id, charge, idempotency key …): one value
    per name and event, keyed by both (migration 0007)."""

    __tablename__ = "event_keys"
    __table_args__ = (Index("ix_event_keys_lookup", "workspace_id", "provider", "name", "value"),)

    # An event's keys are found through the primary key (its leading column). No foreign key:
    # written by the statement that inserts the event (migration 0005).
    event_pk: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    workspace_id: Mapped[str] = mapped_column(String(40))
    provider: Mapped[str] = mapped_column(String(64))
    value: Mapped[str] = mapped_column(String(255))


class OperationEvent(Base):
    """A correlation found between an operation and an event, with its strategy: one per pair,
    keyed by it (migration 0007)."""

    __tablename__ = "operation_events"

    # An operation's links are found through the primary key (its leading column). No foreign
    # keys: the correlation links ids it read in the same transaction, from tables nothing
    # deletes from (migration 0005).
    operation_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    event_pk: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=False, index=True)
    workspace_id: Mapped[str] = mapped_column(String(40))
    strategy: Mapped[str] = mapped_column(String(32))
    assurance: Mapped[str] = mapped_column(String(16))  # strong | weak
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())


class WatchKey(Base):
    """What an event channel of a watched VERIFIED operation matches on: a key value events of
    the provider carry (``event_keys.value``) and the event types, until the watch ends. A
    stored event finds the operations it may contradict by its keys (migration 0008)."""

    __tablename__ = "watch_keys"
    __table_args__ = (
        Index("ix_watch_keys_lookup", "workspace_id", "provider", "value"),
        Index("ix_watch_keys_until", "until"),
    )

    operation_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    provider: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(String(255), primary_key=True)
    workspace_id: Mapped[str] = mapped_column(String(40))
    event_types: Mapped[str] = mapped_column(Text)  # space-separated
    until: Mapped[datetime] = mapped_column(UtcDateTime())


class Transition(Base):
    """Every state change with its cause (append-only), chained by hash per workspace."""

    __tablename__ = "transitions"
    __table_args__ = (
        UniqueConstraint("workspace_id", "seq"),
        Index("ix_transitions_operation", "operation_id", "id"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    workspace_id: Mapped[str] = mapped_column(String(40))
    seq: Mapped[int] = mapped_column(BigInteger)  # position in the workspace's chain
    operation_id: Mapped[str] = mapped_column(ForeignKey("operations.id"))
    from_state: Mapped[str | None] = mapped_column(String(32), nullable=True)
    to_state: Mapped[str] = mapped_column(String(32))
    verdict: Mapped[str | None] = mapped_column(String(32), nullable=True)
    reason: Mapped[str | None] = mapped_column(String(200), nullable=True)
    cause: Mapped[str] = mapped_column(String(64))
    details: Mapped[dict[str, Any] | None] = mapped_column(Json, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    prev_hash: Mapped[str] = mapped_column(String(64))
    hash: Mapped[str] = mapped_column(String(64))


class Receipt(Base):
    __tablename__ = "receipts"
    __table_args__ = (
        Index("ix_receipts_operation_current", "operation_id", "current"),
        # One current receipt per operation, whatever the code does (a superseded one is kept).
        Index(
            "uq_receipts_operation_one_current",
            "operation_id",
            unique=True,
            postgresql_where=text("current"),
            sqlite_where=text("current"),
        ),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # rcpt_…
    operation_id: Mapped[str] = mapped_column(ForeignKey("operations.id"))
    workspace_id: Mapped[str] = mapped_column(String(40))
    body: Mapped[dict[str, Any]] = mapped_column(Json)
    signature: Mapped[str] = mapped_column(String(200))  # base64url Ed25519 signature
    key_id: Mapped[str] = mapped_column(String(64))
    supersedes: Mapped[str | None] = mapped_column(String(40), nullable=True)
    current: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())


class ReceiptKey(Base):
    """Receipt signing keys: the active one signs; retired ones stay to verify old receipts."""

    __tablename__ = "receipt_keys"

    key_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    public_key: Mapped[str] = mapped_column(Text)  # base64 raw Ed25519 public key
    private_key_enc: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    status: Mapped[str] = mapped_column(String(16))  # active | retired
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    retired_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)


class CustomContract(Base):
    """A contract a workspace uploaded for itself (certification ``custom``)."""

    __tablename__ = "custom_contracts"
    __table_args__ = (UniqueConstraint("workspace_id", "contract_id", "version"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    workspace_id: Mapped[str] = mapped_column(ForeignKey("workspaces.id"), index=True)
    contract_id: Mapped[str] = mapped_column(String(200))
    version: Mapped[str] = mapped_column(String(40))
    hash: Mapped[str] = mapped_column(String(64))
    document: Mapped[dict[str, Any]] = mapped_column(Json)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())


class ConsoleSession(Base):
    """A person signed in to the console: the sha256 of the cookie's token, never the token."""

    __tablename__ = "console_sessions"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # sha256 of the token
    workspace_id: Mapped[str] = mapped_column(ForeignKey("workspaces.id"), index=True)
    # Who signed in: an admin key or a console user, one of the two.
    key_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    user_id: Mapped[str | None] = mapped_column(String(40), nullable=True, index=True)
    csrf: Mapped[str] = mapped_column(String(64))  # the session's form token
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)


class ConsoleUser(Base):
    """A person let into one workspace's console by an admin: a scrypt hash of the password the
    server generated for them, never the password; disabled, never deleted (reviews name it)."""

    __tablename__ = "console_users"
    __table_args__ = (UniqueConstraint("workspace_id", "email"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)  # cu_…
    workspace_id: Mapped[str] = mapped_column(ForeignKey("workspaces.id"))
    email: Mapped[str] = mapped_column(String(254))
    password_hash: Mapped[str] = mapped_column(String(200))  # scrypt$n$r$p$salt$hash
    created_at: Mapped[datetime] = mapped_column(UtcDateTime())
    last_sign_in_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)
    disabled_at: Mapped[datetime | None] = mapped_column(UtcDateTime(), nullable=True)


class ConsoleSignIn(Base):
    """A refused console sign-in, by client: counted to slow down guessing across processes."""

    __tablename__ = "console_sign_ins"
    __table_args__ = (Index("ix_console_sign_ins_client_at", "client", "at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    client: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(UtcDateTime())
