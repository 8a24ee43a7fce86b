-- The gateway's witness role: INSERT and SELECT on the witness table, nothing else, and no
-- rights in the audit store's schema. The audit store's roles get nothing here, so whoever can
-- rewrite the store cannot rewrite what the witness saw. {schema} and {role} are quoted identifiers.
GRANT USAGE ON SCHEMA {schema} TO {role};
REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {role};
GRANT SELECT, INSERT ON {schema}.audit_witness TO {role};
GRANT USAGE ON SEQUENCE {schema}.audit_witness_id_seq TO {role};
