-- The buckets' calls refused before they ran, as JSON (parameter → code →
-- calls; host/src/host/refusals.rs).
ALTER TABLE usage_buckets ADD COLUMN refused TEXT NOT NULL DEFAULT '{}';
