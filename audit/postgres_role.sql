-- The gateway's audit role: INSERT and SELECT only. No UPDATE, DELETE or TRUNCATE, so the
-- application cannot rewrite or drop history even if compromised (MLPS 2.0 level 3).
-- Archiving (pruning archived segments) runs as the schema owner, not as this role.
-- {schema} and {role} are substituted as quoted identifiers; create the role first, e.g.
--   CREATE ROLE strongroom_audit LOGIN PASSWORD '...';
GRANT USAGE ON SCHEMA {schema} TO {role};
REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {role};
GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA {schema} TO {role};
