-- Toolsets: each version a row, never changed but to mark the toolset
-- deleted (host/toolsets.rs); keys scoped to one toolset.
CREATE TABLE toolsets (
    tenant      TEXT NOT NULL,
    name        TEXT NOT NULL,
    version     INTEGER NOT NULL CHECK (version >= 1),
    description TEXT NOT NULL,
    tools       TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    deleted_at  BIGINT,
    PRIMARY KEY (tenant, name, version)
);
ALTER TABLE api_keys ADD COLUMN toolset TEXT;
