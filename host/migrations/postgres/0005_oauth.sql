-- The built-in OAuth authorization server: codes and tokens (by their
-- sha256), and the clients registered dynamically.
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
    expires_at   BIGINT NOT NULL,
    used_at      BIGINT,
    revoked_at   BIGINT
);
CREATE INDEX oauth_grants_by_family ON oauth_grants (family);
CREATE INDEX oauth_grants_by_expiry ON oauth_grants (expires_at);
CREATE TABLE oauth_clients (
    tenant     TEXT NOT NULL,
    client_id  TEXT NOT NULL,
    metadata   TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (tenant, client_id)
);
