-- What each tenant's CHEQ transactions hold, kept by a trigger so that every
-- statement that opens, decides, answers, expires or deletes one counts:
-- `pending` and `pending_bytes` the ones marked waiting (their inputs and
-- CHEQ), `stored` and `stored_bytes` all of them (with their decisions and
-- answers). Indexes to find a tenant's waiting, expired and settled ones by
-- state and expiry, and one end user's waiting ones.
CREATE TABLE confirmation_usage (
    tenant        TEXT PRIMARY KEY,
    pending       BIGINT NOT NULL,
    pending_bytes BIGINT NOT NULL,
    stored        BIGINT NOT NULL,
    stored_bytes  BIGINT NOT NULL
);

-- The bytes a transaction holds while it waits, and as stored.
CREATE FUNCTION confirmation_waiting_bytes(c confirmations) RETURNS BIGINT LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN c.state = 'pending' THEN octet_length(c.inputs)::BIGINT + octet_length(c.cheq) ELSE 0 END
$$;
CREATE FUNCTION confirmation_stored_bytes(c confirmations) RETURNS BIGINT LANGUAGE sql IMMUTABLE AS $$
    SELECT octet_length(c.inputs)::BIGINT + octet_length(c.cheq)
        + coalesce(octet_length(c.decision), 0) + coalesce(octet_length(c.result_body), 0)
$$;

INSERT INTO confirmation_usage (tenant, pending, pending_bytes, stored, stored_bytes)
    SELECT tenant, count(*) FILTER (WHERE state = 'pending'), coalesce(sum(confirmation_waiting_bytes(c)), 0),
           count(*), coalesce(sum(confirmation_stored_bytes(c)), 0)
    FROM confirmations c GROUP BY tenant;

-- A change that moves no count (a running transaction marked interrupted or
-- retired) leaves the usage row alone: it takes no lock on it.
CREATE FUNCTION confirmation_count() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    d_pending BIGINT := 0;
    d_pending_bytes BIGINT := 0;
    d_stored BIGINT := 0;
    d_stored_bytes BIGINT := 0;
    of_tenant TEXT;
BEGIN
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        of_tenant := NEW.tenant;
        d_pending := d_pending + (NEW.state = 'pending')::INT;
        d_pending_bytes := d_pending_bytes + confirmation_waiting_bytes(NEW);
        d_stored_bytes := d_stored_bytes + confirmation_stored_bytes(NEW);
    END IF;
    IF TG_OP IN ('DELETE', 'UPDATE') THEN
        of_tenant := OLD.tenant;
        d_pending := d_pending - (OLD.state = 'pending')::INT;
        d_pending_bytes := d_pending_bytes - confirmation_waiting_bytes(OLD);
        d_stored_bytes := d_stored_bytes - confirmation_stored_bytes(OLD);
    END IF;
    IF TG_OP = 'INSERT' THEN
        d_stored := 1;
    ELSIF TG_OP = 'DELETE' THEN
        d_stored := -1;
    END IF;
    IF d_pending = 0 AND d_pending_bytes = 0 AND d_stored = 0 AND d_stored_bytes = 0 THEN
        RETURN NULL;
    END IF;
    INSERT INTO confirmation_usage AS u (tenant, pending, pending_bytes, stored, stored_bytes)
        VALUES (of_tenant, d_pending, d_pending_bytes, d_stored, d_stored_bytes)
        ON CONFLICT (tenant) DO UPDATE SET
            pending = u.pending + excluded.pending,
            pending_bytes = u.pending_bytes + excluded.pending_bytes,
            stored = u.stored + excluded.stored,
            stored_bytes = u.stored_bytes + excluded.stored_bytes;
    RETURN NULL;
END;
$$;
CREATE TRIGGER confirmation_count
    AFTER INSERT OR DELETE OR UPDATE OF state, inputs, cheq, decision, result_body ON confirmations
    FOR EACH ROW EXECUTE FUNCTION confirmation_count();

CREATE INDEX confirmations_by_tenant_state ON confirmations (tenant, state, expires_at);
CREATE INDEX confirmations_by_end_user ON confirmations (tenant, end_user, state, expires_at);
