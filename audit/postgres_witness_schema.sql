-- The PostgreSQL witness table: a copy of every signed checkpoint, outside the audit store's reach.
-- Run by its owner, which must be neither the audit store's owner nor the gateway's audit role.
-- {schema} is substituted as a quoted identifier.
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.audit_witness (
    id BIGSERIAL PRIMARY KEY, log_id TEXT NOT NULL, idx BIGINT NOT NULL, body TEXT NOT NULL,
    witnessed_at TIMESTAMPTZ NOT NULL DEFAULT now());
CREATE INDEX IF NOT EXISTS audit_witness_log ON {schema}.audit_witness (log_id, idx);
