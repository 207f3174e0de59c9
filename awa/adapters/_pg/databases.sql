-- Whole databases on a server: the scratch databases of `awa dev` and of the testing
-- helpers. {name} is filled in as a quoted identifier.

-- name: create_database
CREATE DATABASE {name}

-- name: drop_database
DROP DATABASE IF EXISTS {name} WITH (FORCE)
