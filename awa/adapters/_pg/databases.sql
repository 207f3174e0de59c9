-- Whole databases on a server: the scratch databases of `awa dev` and of the testing
-- helpers. {name} is filled in as a quoted identifier.

-- name: create_database
CREATE DATABASE {name}

-- name: drop_database
DROP DATABASE IF EXISTS {name} WITH (FORCE)

-- name: disconnect_database
-- Ends every other session on the database named by the parameter.
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE datname = %s AND pid <> pg_backend_pid()
