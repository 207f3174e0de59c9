-- The plan settings of the engine's kept connections (connections.py, statements.py).
-- Placeholders are listed in statements.py; every time value is a parameter taken from the
-- engine's clock.

-- name: plan_generically
-- Once, on a connection the engine keeps for one hot statement (never a pooled one): its
-- session plans every prepared statement generically, so the statement is sent alone.
SET plan_cache_mode = force_generic_plan

-- name: generic_plan_here
-- Sent with one statement in a pipeline (one implicit transaction): the statement runs
-- under its prepared generic plan, and the setting ends with that transaction.
SELECT set_config('plan_cache_mode', 'force_generic_plan', true)

-- name: default_plans_here
-- In a transaction begun on a connection that plans generically (a kept one, or one whose
-- transaction ran generic_plan_here): the rest of the transaction plans as the session
-- would by default (the setting's reset value). A release of waiting jobs after a receipt
-- completion reads their snapshots by job id, which a generic plan scans the whole ring
-- for (ADR 0032, "The drain").
SELECT set_config('plan_cache_mode', s.reset_val, true)
FROM pg_settings AS s WHERE s.name = 'plan_cache_mode'
