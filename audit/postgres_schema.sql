-- Strongroom audit tables. Run by the schema owner (migration role), never by the gateway.
-- {schema} is substituted as a quoted identifier.
CREATE SCHEMA IF NOT EXISTS {schema};
CREATE TABLE IF NOT EXISTS {schema}.audit_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS {schema}.audit_records (
    seq BIGINT PRIMARY KEY, time_us BIGINT NOT NULL, event_type TEXT NOT NULL,
    decision TEXT NOT NULL, subject TEXT NOT NULL, tenant TEXT NOT NULL, model TEXT NOT NULL,
    roles TEXT NOT NULL, findings TEXT NOT NULL, event TEXT NOT NULL, content TEXT,
    prev_hash TEXT NOT NULL, hash TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS audit_records_time ON {schema}.audit_records (time_us);
CREATE INDEX IF NOT EXISTS audit_records_subject ON {schema}.audit_records (subject, seq);
CREATE INDEX IF NOT EXISTS audit_records_model ON {schema}.audit_records (model, seq);
CREATE TABLE IF NOT EXISTS {schema}.audit_checkpoints (idx BIGINT PRIMARY KEY, seq BIGINT NOT NULL, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS {schema}.audit_archives (
    first_seq BIGINT PRIMARY KEY, last_seq BIGINT NOT NULL, head TEXT NOT NULL,
    path TEXT NOT NULL, sha256 TEXT NOT NULL);
