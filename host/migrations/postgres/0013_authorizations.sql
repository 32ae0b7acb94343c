-- End-user authorization (host/src/store/authorizations.rs): a tenant's
-- OAuth providers, the links a person follows to grant one access to their
-- account (the sha256 of their `state` only), and the grants that come of
-- it, one per (tenant, end user, provider). Client secrets, tokens and PKCE
-- verifiers are sealed with the secrets key, bound to their row and field.
-- `refreshing_until` is the refresh claim: at most one replica refreshes a
-- grant at a time.
CREATE TABLE authorization_providers (
    tenant        TEXT NOT NULL REFERENCES tenants(name),
    id            TEXT NOT NULL,
    settings      TEXT NOT NULL,
    client_secret TEXT,
    updated_at    BIGINT NOT NULL,
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
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL,
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
    expires_at       BIGINT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    refreshing_until BIGINT,
    PRIMARY KEY (tenant, end_user, provider),
    FOREIGN KEY (tenant, provider) REFERENCES authorization_providers (tenant, id)
);
CREATE INDEX authorization_grants_by_provider ON authorization_grants (tenant, provider);
