//! The embedded store's schema: its migrations, inline, applied in order
//! when the store opens (`SqliteStore::open`).

/// Schema migrations, applied in order; `PRAGMA user_version` records how
/// many have run.
pub(super) const MIGRATIONS: &[&str] = &[
    "
    CREATE TABLE tools (
        tool_id    TEXT PRIMARY KEY,
        name       TEXT NOT NULL UNIQUE,
        created_at INTEGER NOT NULL
    );
    CREATE TABLE versions (
        tool_id    TEXT NOT NULL REFERENCES tools(tool_id),
        version    INTEGER NOT NULL CHECK (version >= 1),
        sha256     TEXT NOT NULL,
        signature  TEXT NOT NULL,
        manifest   TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (tool_id, version)
    );
",
    "
    ALTER TABLE versions ADD COLUMN signature_sha256 TEXT NOT NULL DEFAULT '';
    ALTER TABLE versions ADD COLUMN retired_at INTEGER;
",
    "
    CREATE TABLE secrets (
        id         TEXT PRIMARY KEY,
        value      TEXT NOT NULL,
        updated_at INTEGER NOT NULL
    );
",
    // Tenants: tool names become unique per tenant, secrets and config are
    // per tenant; API keys (hashed) and the append-only audit log. Existing
    // tools, secrets and config move to the built-in tenant `default`.
    "
    CREATE TABLE tenants (
        name               TEXT PRIMARY KEY,
        public_enumeration INTEGER NOT NULL DEFAULT 0,
        quotas             TEXT NOT NULL DEFAULT '{}',
        created_at         INTEGER NOT NULL
    );
    INSERT INTO tenants (name, created_at) VALUES ('default', CAST(strftime('%s','now') AS INTEGER));

    CREATE TABLE tools_by_tenant (
        tool_id    TEXT PRIMARY KEY,
        tenant     TEXT NOT NULL REFERENCES tenants(name),
        name       TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        UNIQUE (tenant, name)
    );
    INSERT INTO tools_by_tenant SELECT tool_id, 'default', name, created_at FROM tools;
    DROP TABLE tools;
    ALTER TABLE tools_by_tenant RENAME TO tools;

    CREATE TABLE tenant_secrets (
        tenant     TEXT NOT NULL REFERENCES tenants(name),
        id         TEXT NOT NULL,
        value      TEXT NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (tenant, id)
    );
    INSERT INTO tenant_secrets SELECT 'default', id, value, updated_at FROM secrets;
    DROP TABLE secrets;
    ALTER TABLE tenant_secrets RENAME TO secrets;

    CREATE TABLE tool_config (
        tenant     TEXT NOT NULL REFERENCES tenants(name),
        tool       TEXT NOT NULL,
        key        TEXT NOT NULL,
        value      TEXT NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (tenant, tool, key)
    );

    CREATE TABLE api_keys (
        id         TEXT PRIMARY KEY,
        tenant     TEXT REFERENCES tenants(name),
        role       TEXT NOT NULL CHECK (role IN ('operator', 'publisher', 'consumer')),
        key_sha256 TEXT NOT NULL UNIQUE,
        label      TEXT,
        created_at INTEGER NOT NULL,
        revoked_at INTEGER,
        CHECK ((role = 'operator') = (tenant IS NULL))
    );

    CREATE TABLE audit (
        seq     INTEGER PRIMARY KEY AUTOINCREMENT,
        at      INTEGER NOT NULL,
        actor   TEXT NOT NULL,
        tenant  TEXT,
        action  TEXT NOT NULL,
        target  TEXT NOT NULL,
        sha256  TEXT,
        detail  TEXT NOT NULL
    );
    CREATE INDEX audit_by_tenant ON audit (tenant, seq);
    CREATE TRIGGER audit_is_append_only_update BEFORE UPDATE ON audit
        BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
    CREATE TRIGGER audit_is_append_only_delete BEFORE DELETE ON audit
        BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
",
    // Idempotent calls: what a call id ran, so a retry is answered without
    // running the tool again. `response` is NULL while the call runs.
    "
    CREATE TABLE idempotent_calls (
        tenant         TEXT NOT NULL,
        caller         TEXT NOT NULL,
        call_id        TEXT NOT NULL,
        request_sha256 TEXT NOT NULL,
        response       TEXT,
        created_at     INTEGER NOT NULL,
        PRIMARY KEY (tenant, caller, call_id)
    );
    CREATE INDEX idempotent_calls_by_age ON idempotent_calls (created_at);
",
    // CHEQ: calls waiting for (or decided by) their end user, and the end
    // users who log in to the built-in confirmation server.
    "
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
        created_at    INTEGER NOT NULL,
        expires_at    INTEGER NOT NULL,
        decided_at    INTEGER,
        decision      TEXT,
        result_status INTEGER,
        result_body   TEXT
    );
    -- A tenant's CHEQ settings: its external confirmation server
    -- (`confirmation-server`) and its publishers' overrides of tools'
    -- confirmation policies (`confirmation:{tool_id}`), as JSON.
    CREATE TABLE tenant_settings (
        tenant     TEXT NOT NULL REFERENCES tenants(name),
        key        TEXT NOT NULL,
        value      TEXT NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (tenant, key)
    );
    CREATE TABLE end_users (
        tenant        TEXT NOT NULL REFERENCES tenants(name),
        name          TEXT NOT NULL,
        password_hash TEXT NOT NULL,
        updated_at    INTEGER NOT NULL,
        PRIMARY KEY (tenant, name)
    );
",
    // CHEQ retention: settled transactions are deleted by age.
    "
    CREATE INDEX confirmations_by_settled_at ON confirmations (COALESCE(decided_at, expires_at));
",
    // Secrets at rest: values are sealed with the secrets key (`sealed` =
    // 1). Rows from before are sealed in place when the store opens; the
    // key check lets a wrong key fail at start even with no secrets stored.
    "
    ALTER TABLE secrets ADD COLUMN sealed INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE store_meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
",
    // The built-in confirmation server's sessions (by the sha256 of the
    // cookie) and the 2025-11-25 MCP calls waiting on a transaction: kept
    // in the store, as a fleet must, so that a restart logs nobody out.
    "
    CREATE TABLE sessions (
        token_sha256 TEXT PRIMARY KEY,
        tenant       TEXT NOT NULL,
        user         TEXT NOT NULL,
        form_token   TEXT NOT NULL,
        expires_at   INTEGER NOT NULL
    );
    CREATE INDEX sessions_by_expiry ON sessions (expires_at);
    CREATE TABLE waiting_calls (
        tenant      TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        id          TEXT NOT NULL,
        kept_until  INTEGER NOT NULL,
        PRIMARY KEY (tenant, fingerprint)
    );
",
    // Designers signed in to the catalog pages (by the sha256 of the
    // cookie), with the id and hash of the key each was opened with: every
    // request checks that key is still live.
    "
    CREATE TABLE designer_sessions (
        token_sha256 TEXT PRIMARY KEY,
        tenant       TEXT NOT NULL,
        key_id       TEXT NOT NULL,
        key_sha256   TEXT NOT NULL,
        form_token   TEXT NOT NULL,
        created_at   INTEGER NOT NULL,
        expires_at   INTEGER NOT NULL
    );
    CREATE INDEX designer_sessions_by_expiry ON designer_sessions (expires_at);
    CREATE INDEX designer_sessions_by_key ON designer_sessions (key_id, created_at);
",
    // What each tenant's call ledger holds, kept by triggers so that every
    // statement that adds, settles, expires or trims a record counts; and an
    // index to find a tenant's oldest records when it is over its quota.
    "
    CREATE TABLE call_ledger_usage (
        tenant  TEXT PRIMARY KEY,
        records INTEGER NOT NULL,
        bytes   INTEGER NOT NULL
    );
    INSERT INTO call_ledger_usage (tenant, records, bytes)
        SELECT tenant, count(*), coalesce(sum(length(CAST(response AS BLOB))), 0)
        FROM idempotent_calls GROUP BY tenant;
    CREATE TRIGGER call_ledger_insert AFTER INSERT ON idempotent_calls BEGIN
        INSERT INTO call_ledger_usage (tenant, records, bytes)
            VALUES (NEW.tenant, 1, coalesce(length(CAST(NEW.response AS BLOB)), 0))
            ON CONFLICT (tenant) DO UPDATE SET records = records + 1, bytes = bytes + excluded.bytes;
    END;
    CREATE TRIGGER call_ledger_update AFTER UPDATE OF response ON idempotent_calls BEGIN
        UPDATE call_ledger_usage
            SET bytes = bytes - coalesce(length(CAST(OLD.response AS BLOB)), 0)
                              + coalesce(length(CAST(NEW.response AS BLOB)), 0)
            WHERE tenant = NEW.tenant;
    END;
    CREATE TRIGGER call_ledger_delete AFTER DELETE ON idempotent_calls BEGIN
        UPDATE call_ledger_usage
            SET records = records - 1, bytes = bytes - coalesce(length(CAST(OLD.response AS BLOB)), 0)
            WHERE tenant = OLD.tenant;
    END;
    CREATE INDEX idempotent_calls_by_tenant_age ON idempotent_calls (tenant, created_at);
",
    // The built-in OAuth authorization server: codes and tokens (by their
    // sha256), and the clients registered dynamically.
    "
    CREATE TABLE oauth_grants (
        token_sha256 TEXT PRIMARY KEY,
        kind         TEXT NOT NULL,
        tenant       TEXT NOT NULL,
        client_id    TEXT NOT NULL,
        end_user     TEXT NOT NULL,
        scope        TEXT NOT NULL,
        resource     TEXT NOT NULL,
        family       TEXT NOT NULL,
        detail       TEXT NOT NULL,
        expires_at   INTEGER NOT NULL,
        used_at      INTEGER,
        revoked_at   INTEGER
    );
    CREATE INDEX oauth_grants_by_family ON oauth_grants (family);
    CREATE INDEX oauth_grants_by_expiry ON oauth_grants (expires_at);
    CREATE TABLE oauth_clients (
        tenant     TEXT NOT NULL,
        client_id  TEXT NOT NULL,
        metadata   TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (tenant, client_id)
    );
",
    // Where a version came from (an OCI reference and manifest digest)
    // and who signed it, as JSON (supply::Provenance).
    "
    ALTER TABLE versions ADD COLUMN provenance TEXT NOT NULL DEFAULT '{}';
",
    // Usage per tool version, door and outcome in minute and hour buckets,
    // one row per replica (host/usage.rs).
    "
    CREATE TABLE usage_buckets (
        tenant      TEXT NOT NULL,
        tool_id     TEXT NOT NULL,
        tool        TEXT NOT NULL,
        version     INTEGER NOT NULL,
        door        TEXT NOT NULL,
        outcome     TEXT NOT NULL,
        granularity TEXT NOT NULL,
        bucket      INTEGER NOT NULL,
        replica     TEXT NOT NULL,
        calls       INTEGER NOT NULL,
        total_ms    REAL NOT NULL,
        histogram   TEXT NOT NULL,
        PRIMARY KEY (tenant, granularity, bucket, tool_id, version, door, outcome, replica)
    );
",
    // The buckets' outbound requests by declared host and status, as JSON.
    "
    ALTER TABLE usage_buckets ADD COLUMN outbound TEXT NOT NULL DEFAULT '{}';
",
    // When a registered OAuth client last obtained a code or refreshed
    // (the sweep and a full tenant's eviction spare clients in use).
    "
    ALTER TABLE oauth_clients ADD COLUMN last_used_at INTEGER;
    CREATE INDEX oauth_clients_unused ON oauth_clients (tenant, created_at) WHERE last_used_at IS NULL;
    CREATE INDEX oauth_grants_by_client ON oauth_grants (tenant, client_id);
",
    // Toolsets: each version a row, never changed but to mark the toolset
    // deleted; keys scoped to one toolset.
    "
    CREATE TABLE toolsets (
        tenant      TEXT NOT NULL,
        name        TEXT NOT NULL,
        version     INTEGER NOT NULL CHECK (version >= 1),
        description TEXT NOT NULL,
        tools       TEXT NOT NULL,
        created_at  INTEGER NOT NULL,
        deleted_at  INTEGER,
        PRIMARY KEY (tenant, name, version)
    );
    ALTER TABLE api_keys ADD COLUMN toolset TEXT;
",
    // The buckets' calls refused before they ran, as JSON (parameter →
    // code → calls; host/refusals.rs).
    "
    ALTER TABLE usage_buckets ADD COLUMN refused TEXT NOT NULL DEFAULT '{}';
",
    // What each tenant's CHEQ transactions hold, kept by triggers so that
    // every statement that opens, decides, answers, expires or deletes one
    // counts: `pending` and `pending_bytes` the ones marked waiting (their
    // inputs and CHEQ), `stored` and `stored_bytes` all of them (with their
    // decisions and answers). Indexes to find a tenant's waiting, expired
    // and settled ones by state and expiry, and one end user's waiting ones.
    "
    CREATE TABLE confirmation_usage (
        tenant        TEXT PRIMARY KEY,
        pending       INTEGER NOT NULL,
        pending_bytes INTEGER NOT NULL,
        stored        INTEGER NOT NULL,
        stored_bytes  INTEGER NOT NULL
    );
    INSERT INTO confirmation_usage (tenant, pending, pending_bytes, stored, stored_bytes)
        SELECT tenant,
               sum(state = 'pending'),
               sum(CASE WHEN state = 'pending'
                   THEN length(CAST(inputs AS BLOB)) + length(CAST(cheq AS BLOB)) ELSE 0 END),
               count(*),
               sum(length(CAST(inputs AS BLOB)) + length(CAST(cheq AS BLOB))
                   + coalesce(length(CAST(decision AS BLOB)), 0) + coalesce(length(CAST(result_body AS BLOB)), 0))
        FROM confirmations GROUP BY tenant;
    CREATE TRIGGER confirmation_usage_insert AFTER INSERT ON confirmations BEGIN
        INSERT INTO confirmation_usage (tenant, pending, pending_bytes, stored, stored_bytes)
            VALUES (NEW.tenant,
                    NEW.state = 'pending',
                    CASE WHEN NEW.state = 'pending'
                        THEN length(CAST(NEW.inputs AS BLOB)) + length(CAST(NEW.cheq AS BLOB)) ELSE 0 END,
                    1,
                    length(CAST(NEW.inputs AS BLOB)) + length(CAST(NEW.cheq AS BLOB))
                        + coalesce(length(CAST(NEW.decision AS BLOB)), 0)
                        + coalesce(length(CAST(NEW.result_body AS BLOB)), 0))
            ON CONFLICT (tenant) DO UPDATE SET
                pending = pending + excluded.pending,
                pending_bytes = pending_bytes + excluded.pending_bytes,
                stored = stored + 1,
                stored_bytes = stored_bytes + excluded.stored_bytes;
    END;
    CREATE TRIGGER confirmation_usage_update
        AFTER UPDATE OF state, inputs, cheq, decision, result_body ON confirmations BEGIN
        UPDATE confirmation_usage SET
            pending = pending + (NEW.state = 'pending') - (OLD.state = 'pending'),
            pending_bytes = pending_bytes
                + CASE WHEN NEW.state = 'pending'
                    THEN length(CAST(NEW.inputs AS BLOB)) + length(CAST(NEW.cheq AS BLOB)) ELSE 0 END
                - CASE WHEN OLD.state = 'pending'
                    THEN length(CAST(OLD.inputs AS BLOB)) + length(CAST(OLD.cheq AS BLOB)) ELSE 0 END,
            stored_bytes = stored_bytes
                + length(CAST(NEW.inputs AS BLOB)) + length(CAST(NEW.cheq AS BLOB))
                + coalesce(length(CAST(NEW.decision AS BLOB)), 0) + coalesce(length(CAST(NEW.result_body AS BLOB)), 0)
                - length(CAST(OLD.inputs AS BLOB)) - length(CAST(OLD.cheq AS BLOB))
                - coalesce(length(CAST(OLD.decision AS BLOB)), 0) - coalesce(length(CAST(OLD.result_body AS BLOB)), 0)
            WHERE tenant = NEW.tenant;
    END;
    CREATE TRIGGER confirmation_usage_delete AFTER DELETE ON confirmations BEGIN
        UPDATE confirmation_usage SET
            pending = pending - (OLD.state = 'pending'),
            pending_bytes = pending_bytes
                - CASE WHEN OLD.state = 'pending'
                    THEN length(CAST(OLD.inputs AS BLOB)) + length(CAST(OLD.cheq AS BLOB)) ELSE 0 END,
            stored = stored - 1,
            stored_bytes = stored_bytes
                - length(CAST(OLD.inputs AS BLOB)) - length(CAST(OLD.cheq AS BLOB))
                - coalesce(length(CAST(OLD.decision AS BLOB)), 0) - coalesce(length(CAST(OLD.result_body AS BLOB)), 0)
            WHERE tenant = OLD.tenant;
    END;
    CREATE INDEX confirmations_by_tenant_state ON confirmations (tenant, state, expires_at);
    CREATE INDEX confirmations_by_end_user ON confirmations (tenant, end_user, state, expires_at);
",
    // End-user authorization (store/authorizations.rs): a tenant's OAuth
    // providers, the links a person follows to grant one access to their
    // account (the sha256 of their `state` only), and the grants that come
    // of it, one per (tenant, end user, provider). Client secrets, tokens
    // and PKCE verifiers are sealed with the secrets key, bound to their
    // row and field. `refreshing_until` is the refresh claim.
    "
    CREATE TABLE authorization_providers (
        tenant        TEXT NOT NULL REFERENCES tenants(name),
        id            TEXT NOT NULL,
        settings      TEXT NOT NULL,
        client_secret TEXT,
        updated_at    INTEGER NOT NULL,
        PRIMARY KEY (tenant, id)
    );
    CREATE TABLE authorization_links (
        tenant       TEXT NOT NULL,
        id           TEXT NOT NULL,
        end_user     TEXT NOT NULL,
        provider     TEXT NOT NULL,
        scopes       TEXT NOT NULL,
        state_sha256 TEXT NOT NULL,
        verifier     TEXT NOT NULL,
        asked_by     TEXT NOT NULL,
        created_at   INTEGER NOT NULL,
        expires_at   INTEGER NOT NULL,
        state        TEXT NOT NULL CHECK (state IN ('pending', 'exchanging', 'connected', 'failed')),
        error        TEXT,
        PRIMARY KEY (tenant, id),
        FOREIGN KEY (tenant, provider) REFERENCES authorization_providers (tenant, id)
    );
    CREATE UNIQUE INDEX authorization_links_by_state ON authorization_links (tenant, state_sha256);
    CREATE INDEX authorization_links_by_end_user ON authorization_links (tenant, end_user, state, expires_at);
    CREATE INDEX authorization_links_open ON authorization_links (tenant, state, expires_at);
    CREATE INDEX authorization_links_by_expiry ON authorization_links (expires_at);
    CREATE TABLE authorization_grants (
        tenant           TEXT NOT NULL,
        end_user         TEXT NOT NULL,
        provider         TEXT NOT NULL,
        access_token     TEXT NOT NULL,
        refresh_token    TEXT,
        scopes           TEXT NOT NULL,
        expires_at       INTEGER,
        created_at       INTEGER NOT NULL,
        updated_at       INTEGER NOT NULL,
        refreshing_until INTEGER,
        PRIMARY KEY (tenant, end_user, provider),
        FOREIGN KEY (tenant, provider) REFERENCES authorization_providers (tenant, id)
    );
    CREATE INDEX authorization_grants_by_provider ON authorization_grants (tenant, provider);
",
    // Usage of calls made through a toolset's root, by toolset version,
    // apart from the vendor's buckets, which count every call (these
    // included): the designer's view of how a toolset's words do
    // (host/usage.rs).
    "
    CREATE TABLE toolset_usage_buckets (
        tenant          TEXT NOT NULL,
        toolset         TEXT NOT NULL,
        toolset_version INTEGER NOT NULL,
        tool_id         TEXT NOT NULL,
        tool            TEXT NOT NULL,
        version         INTEGER NOT NULL,
        door            TEXT NOT NULL,
        outcome         TEXT NOT NULL,
        granularity     TEXT NOT NULL,
        bucket          INTEGER NOT NULL,
        replica         TEXT NOT NULL,
        calls           INTEGER NOT NULL,
        total_ms        REAL NOT NULL,
        histogram       TEXT NOT NULL,
        outbound        TEXT NOT NULL,
        refused         TEXT NOT NULL,
        PRIMARY KEY (tenant, toolset, granularity, bucket, toolset_version, tool_id, version, door, outcome, replica)
    );
    CREATE INDEX toolset_usage_buckets_by_age ON toolset_usage_buckets (granularity, bucket);
",
];
