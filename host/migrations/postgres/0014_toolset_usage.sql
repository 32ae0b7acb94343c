-- Usage of calls made through a toolset's root, by toolset version, apart
-- from the vendor's buckets (which count every call, these included): the
-- designer's view of how a toolset's words do (host/src/host/usage.rs).
-- A table of its own, so that a release before it keeps writing the
-- vendor's buckets unchanged beside one that writes both.
CREATE TABLE toolset_usage_buckets (
    tenant          TEXT NOT NULL,
    toolset         TEXT NOT NULL,
    toolset_version BIGINT NOT NULL,
    tool_id         TEXT NOT NULL,
    tool            TEXT NOT NULL,
    version         BIGINT NOT NULL,
    door            TEXT NOT NULL,
    outcome         TEXT NOT NULL,
    granularity     TEXT NOT NULL,
    bucket          BIGINT NOT NULL,
    replica         TEXT NOT NULL,
    calls           BIGINT NOT NULL,
    total_ms        DOUBLE PRECISION NOT NULL,
    histogram       TEXT NOT NULL,
    outbound        TEXT NOT NULL,
    refused         TEXT NOT NULL,
    PRIMARY KEY (tenant, toolset, granularity, bucket, toolset_version, tool_id, version, door, outcome, replica)
);
CREATE INDEX toolset_usage_buckets_by_age ON toolset_usage_buckets (granularity, bucket);
