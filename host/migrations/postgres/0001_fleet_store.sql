-- The store of a fleet of Plinth replicas: the same rows as the embedded
-- SQLite store (host/src/store/sqlite.rs), plus what replicas share there
-- and nowhere else: component bytes, the server's keys, the change log and
-- the replicas' heartbeats. Times are Unix seconds unless named *_ts.

CREATE TABLE tenants (
    name               TEXT PRIMARY KEY,
    public_enumeration BOOLEAN NOT NULL DEFAULT FALSE,
    quotas             TEXT NOT NULL DEFAULT '{}',
    created_at         BIGINT NOT NULL
);
INSERT INTO tenants (name, created_at) VALUES ('default', EXTRACT(EPOCH FROM now())::BIGINT);

-- Component bytes, content-addressed: written once, never changed.
CREATE TABLE blobs (
    sha256 TEXT PRIMARY KEY,
    bytes  BYTEA NOT NULL
);

CREATE TABLE tools (
    tool_id    TEXT PRIMARY KEY,
    tenant     TEXT NOT NULL REFERENCES tenants(name),
    name       TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    UNIQUE (tenant, name)
);

CREATE TABLE versions (
    tool_id          TEXT NOT NULL REFERENCES tools(tool_id),
    version          INTEGER NOT NULL CHECK (version >= 1),
    sha256           TEXT NOT NULL REFERENCES blobs(sha256),
    signature        TEXT NOT NULL,
    manifest         TEXT NOT NULL,
    created_at       BIGINT NOT NULL,
    signature_sha256 TEXT NOT NULL,
    retired_at       BIGINT,
    PRIMARY KEY (tool_id, version)
);

CREATE TABLE secrets (
    tenant     TEXT NOT NULL REFERENCES tenants(name),
    id         TEXT NOT NULL,
    value      TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (tenant, id)
);

CREATE TABLE tool_config (
    tenant     TEXT NOT NULL REFERENCES tenants(name),
    tool       TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (tenant, tool, key)
);

CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    tenant     TEXT REFERENCES tenants(name),
    role       TEXT NOT NULL CHECK (role IN ('operator', 'publisher', 'consumer')),
    key_sha256 TEXT NOT NULL UNIQUE,
    label      TEXT,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT,
    CHECK ((role = 'operator') = (tenant IS NULL))
);

CREATE TABLE audit (
    seq    BIGSERIAL PRIMARY KEY,
    at     BIGINT NOT NULL,
    actor  TEXT NOT NULL,
    tenant TEXT,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    sha256 TEXT,
    detail TEXT NOT NULL
);
CREATE INDEX audit_by_tenant ON audit (tenant, seq);
CREATE FUNCTION audit_is_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only';
END
$$;
CREATE TRIGGER audit_is_append_only_rows BEFORE UPDATE OR DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION audit_is_append_only();
CREATE TRIGGER audit_is_append_only_truncate BEFORE TRUNCATE ON audit
    FOR EACH STATEMENT EXECUTE FUNCTION audit_is_append_only();

-- Idempotent calls; `runner` is the replica that claimed the call.
CREATE TABLE idempotent_calls (
    tenant         TEXT NOT NULL,
    caller         TEXT NOT NULL,
    call_id        TEXT NOT NULL,
    request_sha256 TEXT NOT NULL,
    response       TEXT,
    created_at     BIGINT NOT NULL,
    runner         TEXT,
    PRIMARY KEY (tenant, caller, call_id)
);
CREATE INDEX idempotent_calls_by_age ON idempotent_calls (created_at);

-- CHEQ transactions; `runner` is the replica that runs an accepted one.
CREATE TABLE confirmations (
    id            TEXT PRIMARY KEY,
    tenant        TEXT NOT NULL REFERENCES tenants(name),
    tool_id       TEXT NOT NULL,
    version       INTEGER NOT NULL,
    end_user      TEXT NOT NULL,
    front_door    TEXT NOT NULL,
    call_id       TEXT NOT NULL,
    inputs        TEXT NOT NULL,
    cheq          TEXT NOT NULL,
    state         TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    expires_at    BIGINT NOT NULL,
    decided_at    BIGINT,
    decision      TEXT,
    result_status INTEGER,
    result_body   TEXT,
    runner        TEXT
);
CREATE INDEX confirmations_by_settled_at ON confirmations (COALESCE(decided_at, expires_at));
CREATE INDEX confirmations_running ON confirmations (state) WHERE state = 'accepted';

CREATE TABLE tenant_settings (
    tenant     TEXT NOT NULL REFERENCES tenants(name),
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (tenant, key)
);

CREATE TABLE end_users (
    tenant        TEXT NOT NULL REFERENCES tenants(name),
    name          TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    updated_at    BIGINT NOT NULL,
    PRIMARY KEY (tenant, name)
);

-- The secrets-key check (a value sealed with the key): a replica started
-- with another key fails at start.
CREATE TABLE store_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- The server's own keys (CHEQ signing keys, the MCP request-state key),
-- sealed with the secrets key: every replica signs and seals alike.
CREATE TABLE server_keys (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- The built-in confirmation server's sessions, by the sha256 of the cookie.
CREATE TABLE sessions (
    token_sha256 TEXT PRIMARY KEY,
    tenant       TEXT NOT NULL,
    end_user     TEXT NOT NULL,
    form_token   TEXT NOT NULL,
    expires_at   BIGINT NOT NULL
);
CREATE INDEX sessions_by_expiry ON sessions (expires_at);

-- 2025-11-25 MCP calls waiting on a CHEQ transaction.
CREATE TABLE waiting_calls (
    tenant      TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    id          TEXT NOT NULL,
    kept_until  BIGINT NOT NULL,
    PRIMARY KEY (tenant, fingerprint)
);

-- The change log: one row per change a replica caches, written in the
-- change's transaction (under a lock, so sequence order is commit order).
CREATE TABLE changes (
    seq   BIGSERIAL PRIMARY KEY,
    topic TEXT NOT NULL,
    at_ts TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Replicas' heartbeats, in the database's clock: a replica is live while
-- its beat is recent.
CREATE TABLE replicas (
    id           TEXT PRIMARY KEY,
    started_ts   TIMESTAMPTZ NOT NULL DEFAULT now(),
    heartbeat_ts TIMESTAMPTZ NOT NULL DEFAULT now()
);
