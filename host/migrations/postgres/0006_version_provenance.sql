-- Where a version came from (an OCI reference and manifest digest) and who
-- signed it, as JSON (supply::Provenance); '{}' for posted, unsigned bytes.
ALTER TABLE versions ADD COLUMN provenance TEXT NOT NULL DEFAULT '{}';
