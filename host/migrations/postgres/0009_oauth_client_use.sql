-- When a registered OAuth client last obtained a code or refreshed: the
-- sweep keeps a client that was used for a refresh token's lifetime after
-- its last use, and a full tenant evicts only clients never used.
ALTER TABLE oauth_clients ADD COLUMN last_used_at BIGINT;
CREATE INDEX oauth_clients_unused ON oauth_clients (tenant, created_at) WHERE last_used_at IS NULL;
-- The sweep and a full tenant's eviction ask whether a client holds a credential.
CREATE INDEX oauth_grants_by_client ON oauth_grants (tenant, client_id);
