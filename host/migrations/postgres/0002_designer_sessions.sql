-- Designers signed in to the catalog pages, by the sha256 of the cookie,
-- with the id and hash of the key each was opened with: every request
-- checks that key is still live.
CREATE TABLE designer_sessions (
    token_sha256 TEXT PRIMARY KEY,
    tenant       TEXT NOT NULL,
    key_id       TEXT NOT NULL,
    key_sha256   TEXT NOT NULL,
    form_token   TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    expires_at   BIGINT NOT NULL
);
CREATE INDEX designer_sessions_by_expiry ON designer_sessions (expires_at);
CREATE INDEX designer_sessions_by_key ON designer_sessions (key_id, created_at);
