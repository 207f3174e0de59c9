-- The connection limits a session of this role on this database is subject to, and how
-- many connections count against each now. pg_stat_activity shows every session's role
-- and database to any role. Superusers are exempt from the role's and the database's
-- CONNECTION LIMIT and may use the superuser_reserved_connections.

-- name: connection_limits
SELECT r.rolname AS role_name,
       r.rolsuper AS superuser,
       r.rolconnlimit AS role_limit,
       d.datname AS database_name,
       d.datconnlimit AS database_limit,
       current_setting('max_connections')::int AS max_connections,
       current_setting('superuser_reserved_connections')::int AS reserved_connections,
       (SELECT count(*) FROM pg_stat_activity a
        WHERE a.usename = r.rolname AND a.backend_type = 'client backend') AS role_in_use,
       (SELECT count(*) FROM pg_stat_activity a
        WHERE a.datname = d.datname AND a.backend_type = 'client backend') AS database_in_use,
       (SELECT count(*) FROM pg_stat_activity a
        WHERE a.backend_type = 'client backend') AS server_in_use
FROM pg_roles r, pg_database d
WHERE r.rolname = current_user AND d.datname = current_database()
