-- The order sessions were opened in, to break ties between sessions of one
-- key opened in the same second: the oldest is crowded out first, as the
-- SQLite store does by rowid.
ALTER TABLE designer_sessions ADD COLUMN seq BIGINT GENERATED ALWAYS AS IDENTITY;
