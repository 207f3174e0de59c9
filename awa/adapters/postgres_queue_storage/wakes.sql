-- Coalesced wake-ups of the queue-storage engine (wakes.py).
-- Placeholders are listed in statements.py; every time value is a parameter taken from the
-- engine's clock.

-- name: wake_quietly
-- Wake-ups sent after the enqueues committed, as one statement that is its own
-- transaction. That transaction needs no durable commit (a notification does not survive
-- a crash anyway), so it does not wait for the WAL flush while it holds the notify lock:
-- synchronous_commit is off for it alone (set_config(..., true) is local to it).
SELECT set_config('synchronous_commit', 'off', true) AS quiet,
    count(pg_notify(channel, '')) AS woken
FROM unnest(%(channels)s::text[]) AS i(channel)
