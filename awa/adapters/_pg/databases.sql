-- Whole databases on a server: the scratch databases of `awa dev` and of the testing
-- helpers. {name} is filled in as a quoted identifier.

-- name: create_database
CREATE DATABASE {name}

-- name: create_database_from
-- A copy of the database {template} (nobody may be connected to it; the server waits
-- up to 5 s for sessions that are ending).
CREATE DATABASE {name} TEMPLATE {template}

-- name: drop_database
DROP DATABASE IF EXISTS {name} WITH (FORCE)

-- name: disconnect_database
-- Ends every other session on the database named by the parameter.
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE datname = %s AND pid <> pg_backend_pid()
