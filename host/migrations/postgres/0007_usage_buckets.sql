-- Usage per tool version, door and outcome in minute and hour buckets, one
-- row per replica (host/usage.rs); readers sum the replicas' rows.
CREATE TABLE usage_buckets (
    tenant      TEXT NOT NULL,
    tool_id     TEXT NOT NULL,
    tool        TEXT NOT NULL,
    version     BIGINT NOT NULL,
    door        TEXT NOT NULL,
    outcome     TEXT NOT NULL,
    granularity TEXT NOT NULL,
    bucket      BIGINT NOT NULL,
    replica     TEXT NOT NULL,
    calls       BIGINT NOT NULL,
    total_ms    DOUBLE PRECISION NOT NULL,
    histogram   TEXT NOT NULL,
    PRIMARY KEY (tenant, granularity, bucket, tool_id, version, door, outcome, replica)
);
