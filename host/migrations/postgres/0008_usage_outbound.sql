-- The buckets' outbound requests by declared host and status, as JSON
-- (declared host → status → requests).
ALTER TABLE usage_buckets ADD COLUMN outbound TEXT NOT NULL DEFAULT '{}';
