-- What each tenant's call ledger holds, kept by a trigger so that every
-- statement that adds, settles, expires or trims a record counts; and an
-- index to find a tenant's oldest records when it is over its quota.
CREATE TABLE call_ledger_usage (
    tenant  TEXT PRIMARY KEY,
    records BIGINT NOT NULL,
    bytes   BIGINT NOT NULL
);
INSERT INTO call_ledger_usage (tenant, records, bytes)
    SELECT tenant, count(*), coalesce(sum(octet_length(response)), 0)
    FROM idempotent_calls GROUP BY tenant;

CREATE FUNCTION call_ledger_count() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO call_ledger_usage (tenant, records, bytes)
            VALUES (NEW.tenant, 1, coalesce(octet_length(NEW.response), 0))
            ON CONFLICT (tenant) DO UPDATE
            SET records = call_ledger_usage.records + 1, bytes = call_ledger_usage.bytes + excluded.bytes;
    ELSIF TG_OP = 'UPDATE' THEN
        UPDATE call_ledger_usage
            SET bytes = bytes - coalesce(octet_length(OLD.response), 0) + coalesce(octet_length(NEW.response), 0)
            WHERE tenant = NEW.tenant;
    ELSE
        UPDATE call_ledger_usage
            SET records = records - 1, bytes = bytes - coalesce(octet_length(OLD.response), 0)
            WHERE tenant = OLD.tenant;
    END IF;
    RETURN NULL;
END;
$$;
CREATE TRIGGER call_ledger_count AFTER INSERT OR DELETE OR UPDATE OF response ON idempotent_calls
    FOR EACH ROW EXECUTE FUNCTION call_ledger_count();

CREATE INDEX idempotent_calls_by_tenant_age ON idempotent_calls (tenant, created_at);
