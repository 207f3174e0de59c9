-- Claims of the queue-storage engine (claim.py): the walk over the lanes, the sorted and
-- per-key-limited claims, and the fragments naming the ring's tables.
-- Placeholders are listed in statements.py; every time value is a parameter taken from the
-- engine's clock.

-- name: quiet_commit
-- An expression a claim statement evaluates once (in its `mixed` row): the claim's
-- transaction commits without waiting for the WAL flush. A claim lost in a server crash
-- leaves its jobs available, so they run again, as after any crash (at-least-once); any
-- later durable commit (the attempt's completion, a retry) flushes the WAL up to and
-- including the claim, so a recorded outcome never lacks its claim. Under load every
-- claim otherwise queued behind the producers' flushes: most of its round trip and the
-- tail of pickup latency. The setting is local to the transaction and is read at its
-- commit.
set_config('synchronous_commit', 'off', true)

-- name: claim
-- The common claim, one statement on its own (autocommit): windows are walked in lane
-- order only, so a third less of the ring is planned and locked, and it moves the cursors
-- and the counters itself. A window that needs sorting (it holds a row appended out of
-- (run_at, job id) order) is taken only whole: when all its unclaimed rows are due and
-- fit in the batch, the order among them does not matter and the cursor moves past them
-- as for an ordered window. Such windows come from promoted, retried or edited jobs
-- (new jobs are stamped under their lane's lock, lane_stamp), and from producers whose
-- clocks are far apart; they are usually a few rows long.
-- When a sorted window cannot be taken whole (or a unique key would have to move with
-- the claim) it claims nothing and reports `mixed`; the engine then runs the general
-- claim_sorted in a transaction, and keeps using it for the queue while that reports a
-- sorted window longer than its batch.
-- Unless the queue is paused, lock the lane heads nobody else is claiming from and take
-- the best unclaimed rows of their windows (lane_seq >= cursor), merged across lanes by
-- (aged priority, run_at, job id). Within one lane that key only grows along an ordered
-- window (a lane has one priority, the window is in (run_at, job id) order and aging only
-- favours older rows), so the merge is exact without reading `limit` rows of every lane
-- (ADR 0006, "The claim's merge"). A first walk reads an even share of the batch from
-- each ordered window (`limit` / lanes rounded up; a sorted window `limit` + 1 rows, to
-- tell whether it fits), or, when the claimer names a lead lane among them, the whole
-- batch of that lane and one row of each other. Every row not read has a larger key than the last row read of
-- its lane, so when at least `limit` rows read have keys up to the smallest such last
-- key, the best `limit` of them are the answer. Otherwise the window with that smallest
-- last key goes on by as many rows as can still rank within the batch (a run of one
-- lane ahead of the others, the usual shape of a backlog from concurrent producers); and
-- if the test still fails, every window that may go on does, by at most `limit` less its
-- rows read and the other lanes' rows read below its last one. Aging uses integer
-- microseconds, exactly like the Python PriorityAging. On a walk (claim_walk), OFFSET 0 keeps each NOT EXISTS a per-row index probe (the planner would
-- otherwise build a join against a whole partition when its statistics are stale).
-- The same statement moves the cursor of every lane it took rows from: in an ordered
-- window the rows taken are a prefix of the lane's unclaimed rows in lane order, and a
-- sorted window was taken whole, so every row below the last one taken is claimed or
-- tombstoned.
{claim_body ready_entries=ring_ready_entries claims=ring_claims tombstones=ring_tombstones
    walk_position=nothing refused_elsewhere=nothing or_elsewhere=nothing
    slot_outputs=nothing slot_columns=nothing}

-- name: claim_body
-- The claim statement; its ring tables and its in-slot checks are filled in by claim and
-- claim_in_slot.
WITH {key_window_cte}, heads AS (
    {claim_heads keyed_heads=window_heads}
), first_lanes AS (
    -- The first walk of each lane not left alone: from its cursor, an even share of the
    -- batch (all of it for a lone lane), and at least two rows (when the batch has room
    -- for them): a lane's second row bounds what its rows not read can be, so when each
    -- of many lanes (a window of concurrency keys) holds one of the batch's best rows,
    -- the first walk already shows it, where one row per lane leaves every other lane's
    -- next row unknown and the later walks read up to the batch from each. When the claimer names a lead lane among the
    -- ordered windows (the one its last claim took a whole batch from: a run of one lane
    -- ahead of the others; priority 0 names none), that lane's share is the whole batch
    -- and every other ordered window's is one row, its head; the merge below is exact
    -- for any shares. A sorted window: its unclaimed rows, due or not, one more than
    -- fits (to tell).
    SELECT h.queue, h.priority, h.shard, h.next_seq, h.disordered, 1 AS pass,
        h.claim_seq AS walk_from,
        CASE WHEN h.disordered THEN %(limit)s + 1
            WHEN %(lead_priority)s::smallint = 0
                OR NOT EXISTS (
                    SELECT 1 FROM heads o
                    WHERE NOT o.contested AND NOT o.disordered
                      AND o.priority = %(lead_priority)s::smallint
                      AND o.shard = %(lead_shard)s::int)
                THEN CASE WHEN count(*) OVER () = 1 THEN %(limit)s
                    ELSE least(%(limit)s,
                        greatest(2, (%(limit)s + count(*) OVER () - 1) / count(*) OVER ()))
                    END
            WHEN h.priority = %(lead_priority)s::smallint AND h.shard = %(lead_shard)s::int
                THEN %(limit)s
            ELSE 1 END AS share
    FROM heads h
    WHERE NOT h.contested
), first_walk AS (
    {claim_walk lanes=claim_first_lanes}
), first_keyed AS (
    SELECT f.priority, f.shard, f.lane_seq, f.run_at, f.job_id, {claim_effective} AS effective
    FROM first_walk f
), first_ends AS (
    -- Per lane: the rows the first walk read and its last one (the largest key of an
    -- ordered window); `more` when the window filled its share and may go on.
    SELECT l.queue, l.priority, l.shard, l.next_seq, g.n, e.lane_seq AS last_seq,
        e.effective, e.run_at, e.job_id,
        NOT l.disordered AND g.n >= l.share AS more
    FROM first_lanes l
    CROSS JOIN LATERAL (
        SELECT count(*) AS n FROM first_keyed k
        WHERE k.priority = l.priority AND k.shard = l.shard) g
    LEFT JOIN LATERAL (
        SELECT k.lane_seq, k.effective, k.run_at, k.job_id FROM first_keyed k
        WHERE k.priority = l.priority AND k.shard = l.shard
        ORDER BY k.lane_seq DESC LIMIT 1) e ON true
), second_lanes AS (
    -- Unless `limit` rows read rank up to the smallest last key of the windows that may
    -- go on (every row not read ranks after it), the window with that last key goes on by
    -- as many rows as can still rank within the batch.
    SELECT e.queue, e.priority, e.shard, e.next_seq, false AS disordered, 2 AS pass,
        e.last_seq + 1 AS walk_from, %(limit)s - b.below AS share
    FROM (SELECT * FROM first_ends WHERE more
          ORDER BY effective, run_at, job_id LIMIT 1) e
    CROSS JOIN LATERAL (
        SELECT count(*) AS below FROM first_keyed k
        WHERE (k.effective, k.run_at, k.job_id) <= (e.effective, e.run_at, e.job_id)) b
    WHERE b.below < %(limit)s
), second_walk AS (
    {claim_walk lanes=claim_second_lanes}
), read_keyed AS (
    SELECT * FROM first_keyed
    UNION ALL
    SELECT f.priority, f.shard, f.lane_seq, f.run_at, f.job_id, {claim_effective}
    FROM second_walk f
), read_ends AS (
    -- first_ends after the second walk.
    SELECT e.queue, e.priority, e.shard, e.next_seq, e.n + coalesce(g.n, 0) AS n,
        coalesce(g.lane_seq, e.last_seq) AS last_seq,
        coalesce(g.effective, e.effective) AS effective,
        coalesce(g.run_at, e.run_at) AS run_at, coalesce(g.job_id, e.job_id) AS job_id,
        CASE WHEN s.pass IS NULL THEN e.more ELSE coalesce(g.n, 0) >= s.share END AS more
    FROM first_ends e
    LEFT JOIN second_lanes s ON s.priority = e.priority AND s.shard = e.shard
    LEFT JOIN LATERAL (
        SELECT count(*) OVER () AS n, k.lane_seq, k.effective, k.run_at, k.job_id
        FROM read_keyed k
        WHERE s.pass IS NOT NULL AND k.priority = e.priority AND k.shard = e.shard
          AND k.lane_seq >= s.walk_from
        ORDER BY k.lane_seq DESC LIMIT 1) g ON true
), third_lanes AS (
    -- When the second walk ran and still fewer than `limit` rows read rank up to the
    -- smallest last key of the windows that may go on, each of those goes on by at most
    -- the rows of it that can still rank within the batch: `limit` less its rows read and
    -- the other lanes' rows read below its last one.
    SELECT e.queue, e.priority, e.shard, e.next_seq, false AS disordered, 3 AS pass,
        e.last_seq + 1 AS walk_from,
        %(limit)s - e.n - (
            SELECT count(*) FROM read_keyed k
            WHERE (k.priority, k.shard) <> (e.priority, e.shard)
              AND (k.effective, k.run_at, k.job_id) < (e.effective, e.run_at, e.job_id))
        AS share
    FROM read_ends e
    WHERE e.more AND EXISTS (SELECT 1 FROM second_lanes)
      AND (SELECT count(*) FROM read_keyed k
           WHERE (k.effective, k.run_at, k.job_id) <= (
               SELECT r.effective, r.run_at, r.job_id FROM read_ends r WHERE r.more
               ORDER BY r.effective, r.run_at, r.job_id LIMIT 1)) < %(limit)s
), third_walk AS (
    {claim_walk lanes=claim_third_lanes}
), picked AS (
    SELECT * FROM first_walk
    UNION ALL
    SELECT * FROM second_walk
    UNION ALL
    SELECT * FROM third_walk
), ranked AS (
    SELECT p.*, row_number() OVER (ORDER BY p.effective, p.run_at, p.job_id) AS rank
    FROM (SELECT f.*, {claim_effective} AS effective FROM picked f) p
), refused AS (
    -- A sorted window this statement cannot take whole: a row of it is not due yet, or
    -- they do not all fit in the batch (more than `limit`, or better rows elsewhere).
    SELECT EXISTS (
        SELECT 1 FROM ranked r WHERE r.disordered
        GROUP BY r.priority, r.shard
        HAVING count(*) > %(limit)s OR max(r.rank) > %(limit)s
            OR bool_or(r.run_at > %(now)s::timestamptz))
        OR EXISTS (SELECT 1 FROM picked u
                   WHERE u.unique_key IS NOT NULL AND u.unique_states IS NOT NULL
                     AND get_bit(u.unique_states, 1) <> get_bit(u.unique_states, 2))
        AS mixed{refused_elsewhere}
), candidates AS (
    SELECT r.* FROM ranked r
    WHERE r.rank <= %(limit)s AND NOT (SELECT mixed {or_elsewhere} FROM refused)
), inserted AS (
    {claim_inserted}
), advanced AS (
    {claim_advanced}
), counted AS (
    {claim_counted}
), mixed AS (
    -- Whether the general claim is needed: a locked lane holds a sorted window that
    -- cannot be taken whole, or a job's unique key is held in only one of available /
    -- running (its claim must move the key in the same transaction).
    SELECT (SELECT mixed FROM refused) AS mixed,
        -- A lane was left alone (see heads): the engine claims again at once.
        EXISTS (SELECT 1 FROM heads WHERE contested) AS contested,
        {key_window_cursor} AS key_cursor,
        {quiet_commit} AS quiet{slot_outputs}
), claimed AS (
    {claim_claimed}
)
-- One row even when nothing was claimed (id NULL), so `mixed` and `contested` always
-- come back.
SELECT r.*, m.mixed, m.contested, m.key_cursor{slot_columns}
FROM mixed m LEFT JOIN claimed r ON true
ORDER BY r.effective, r.run_at, r.job_id

-- name: claim_heads
-- The lanes a claim statement locks (its `heads`): those of the queue with rows past
-- their cursor that no other claim holds; `keyed_heads` says which keyed lanes.
SELECT h.queue, h.priority, h.shard, h.claim_seq, l.next_seq,
        (l.disorder_seq >= h.claim_seq) AS disordered,
        -- Read from the head's newest version once it is locked: a writer that retired a
        -- row of this lane committed after this statement's snapshot was taken, so the
        -- walk cannot see its tombstone. The lane is left alone (see `contested`).
        CASE WHEN h.retired_xid IS NULL THEN false
            ELSE NOT pg_visible_in_snapshot(h.retired_xid, pg_current_snapshot())
        END AS contested
    FROM {s}.claim_heads h
    JOIN {s}.lanes l USING (queue, priority, shard)
    WHERE h.queue = %(queue)s
      -- A lane with nothing appended past its cursor is not locked: any ready row this
      -- statement can see was committed together with a lanes.next_seq above it.
      AND l.next_seq > h.claim_seq
      -- a paused queue hands out nothing
      AND NOT EXISTS (
          SELECT 1 FROM awa.queue_meta m WHERE m.queue = %(queue)s AND m.paused)
      {keyed_heads}
    ORDER BY h.priority, h.shard
    FOR UPDATE OF h SKIP LOCKED

-- name: claim_inserted
-- A claim statement's `inserted`: a claim of each of its `candidates` in the claims
-- table it binds (`claims`), in claim order (the order of the claim ids).
INSERT INTO {claims} (slot, claim_id, ready_fact, job_id, run_lease, queue, attempted_at,
        deadline_at)
    SELECT slot, nextval('{s}.fact_seq'), fact_id, job_id, run_lease + 1, %(queue)s, %(now)s,
        %(deadline_at)s
    FROM (SELECT * FROM candidates ORDER BY effective, run_at, job_id) ordered
    RETURNING slot, claim_id, ready_fact, job_id

-- name: claim_advanced
-- A claim statement's `advanced`: the cursor of each lane it took `candidates` from moves
-- past the last one taken.
UPDATE {s}.claim_heads h SET claim_seq = a.next_seq
    FROM (SELECT c.priority, c.shard, max(c.lane_seq) + 1 AS next_seq
          FROM candidates c
          GROUP BY c.priority, c.shard) a
    WHERE h.queue = %(queue)s AND h.priority = a.priority AND h.shard = a.shard
      AND a.next_seq > h.claim_seq

-- name: claim_counted
-- A claim statement's `counted`: the jobs of its `inserted` move from available to
-- running (counters last, in key order).
INSERT INTO {s}.queue_counts AS q (queue, state, bucket, n)
    SELECT %(queue)s, v.st::awa.job_state, (16 + pg_backend_pid() %% 8)::smallint, v.d
    FROM (SELECT count(*) AS n FROM inserted) k
    CROSS JOIN LATERAL (VALUES ('available', -k.n), ('running', k.n)) AS v(st, d)
    WHERE k.n > 0
    ORDER BY v.st
    ON CONFLICT (queue, state, bucket) DO UPDATE SET n = q.n + EXCLUDED.n

-- name: claim_claimed
-- A claim statement's `claimed`, from its `inserted` and `candidates`: the claimed
-- snapshots, exactly as the job_facts view resolves an open receipt without a lease, so
-- the claimer needs no second read (the walk carried the bodies).
SELECT i.slot, i.claim_id, i.ready_fact, i.job_id, c.priority, c.shard,
        c.job_id AS id, c.kind, c.queue, c.args, 'running' AS state,
        (c.attempt + 1)::smallint AS attempt, c.max_attempts, c.run_at,
        %(now)s::timestamptz AS heartbeat_at, %(deadline_at)s::timestamptz AS deadline_at,
        %(now)s::timestamptz AS attempted_at, c.finalized_at, c.created_at, c.errors,
        c.metadata, c.tags, c.unique_key, c.unique_states, c.callback_id,
        c.callback_timeout_at, c.run_lease + 1 AS run_lease, c.progress, c.disordered,
        c.effective
    FROM inserted i
    JOIN candidates c ON c.slot = i.slot AND c.fact_id = i.ready_fact

-- name: claim_lone_in_slot
-- The claim of one lane in one ring slot: claim_in_slot without the merge across lanes
-- or the window of keyed lanes, for the common shape: a queue of one priority without
-- concurrency keys whose claims lock one lane, or a few lanes that producers spilled
-- into beside each other, holding fewer rows than the batch. The server builds executor
-- state for every node of a plan on every run, used or not, and the merge's and the key
-- window's nodes were most of the claim's (claim_in_slot has 155 plan nodes); here a
-- lone lane's first due rows in lane order are the batch, and so are the due rows of
-- several lanes that all fit in it. Otherwise (`several`) it claims nothing and moves
-- nothing; the engine then runs claim_in_slot at once and keeps using it for the queue
-- until one of its runs locked lanes this statement would have taken (`lone`). Every
-- other outcome (`mixed`, `contested`, `elsewhere`, the ring's slots) is
-- claim_in_slot's; the key cursor is never moved.
WITH heads AS (
    {claim_heads keyed_heads=keyless_heads}
), several AS (
    -- Whether the claim is claim_in_slot's to make: a keyed lane has rows, a locked
    -- window is sorted, or more than one lane is locked and their rows past the cursors
    -- may not all fit in the batch. When they all fit, every due row is taken and no
    -- merge decides which: the lanes producers spill into beside each other hold a few
    -- rows each while workers keep up.
    SELECT EXISTS (SELECT 1 FROM heads WHERE disordered)
        OR (SELECT count(*) > 1 AND sum(next_seq - claim_seq) > %(limit)s FROM heads)
        OR EXISTS ({keyed_lanes_with_rows}) AS several
), lone AS (
    -- The lanes walked, as claim_walk reads them: from the cursor, a batch at most.
    SELECT h.queue, h.priority, h.shard, h.next_seq, h.disordered, 1 AS pass,
        h.claim_seq AS walk_from, %(limit)s AS share
    FROM heads h
    WHERE NOT h.contested AND NOT (SELECT several FROM several)
), walked AS (
    -- In an ordered window the aged priority only improves along lane order, so a lone
    -- lane's first due rows are the batch; several lanes' due rows all fit in it.
    SELECT f.*, {claim_effective} AS effective
    FROM ({claim_walk lanes=claim_lone_lanes ready_entries=slot_ready_entries
        claims=slot_claims tombstones=slot_tombstones walk_position=slot_walk_position}) f
), refused AS (
    SELECT EXISTS (
            SELECT 1 FROM walked u
            WHERE u.unique_key IS NOT NULL AND u.unique_states IS NOT NULL
              AND get_bit(u.unique_states, 1) <> get_bit(u.unique_states, 2)) AS mixed,
        -- claim_in_slot's `elsewhere`, for the lanes walked here.
        {slot_walks_elsewhere walks=claim_lone_lanes walked=claim_lone_walked} AS elsewhere
), candidates AS (
    SELECT w.* FROM walked w
    WHERE NOT (SELECT mixed OR elsewhere FROM refused)
), inserted AS (
    {claim_inserted claims=slot_claims}
), advanced AS (
    {claim_advanced}
), counted AS (
    {claim_counted}
), mixed AS (
    SELECT r.mixed, r.elsewhere,
        EXISTS (SELECT 1 FROM heads WHERE contested) AS contested,
        (SELECT several FROM several) AS several,
        {no_key_cursor} AS key_cursor,
        {quiet_commit} AS quiet,
        (SELECT current_slot FROM {s}.ring_state) AS current_slot,
        (SELECT (current_slot + 1) %% slot_count FROM {s}.ring_state) AS next_slot
    FROM refused r
), claimed AS (
    {claim_claimed}
)
SELECT r.*, m.mixed, m.contested, m.key_cursor, m.elsewhere, m.current_slot, m.next_slot,
    m.several
FROM mixed m LEFT JOIN claimed r ON true
ORDER BY r.effective, r.run_at, r.job_id

-- name: claim_walk
-- A claim's walk of the lanes `{lanes}` (queue, priority, shard, disordered, pass,
-- walk_from, share): each one's unclaimed rows in lane order from position walk_from, at
-- most share of them (none when share is not positive); an ordered window only its due
-- rows.
SELECT w.*, h.disordered, h.pass
FROM (SELECT * FROM {lanes} WHERE share > 0) h
CROSS JOIN LATERAL (
    SELECT o.* FROM (
        SELECT {claim_walk_columns}{walk_position}
        FROM {ready_entries} r
        WHERE r.queue = h.queue AND r.priority = h.priority AND r.shard = h.shard
          AND r.lane_seq >= h.walk_from AND (h.disordered OR r.run_at <= %(now)s)
        ORDER BY r.lane_seq
        OFFSET 0) o
    WHERE NOT EXISTS (
          SELECT 1 FROM {claims} c WHERE c.slot = o.slot AND c.ready_fact = o.fact_id
          OFFSET 0)
      AND NOT EXISTS (
          SELECT 1 FROM {tombstones} t
          WHERE t.slot = o.slot AND t.ready_fact = o.fact_id OFFSET 0)
    ORDER BY o.lane_seq
    LIMIT h.share
) w

-- name: claim_first_lanes
first_lanes

-- name: claim_second_lanes
second_lanes

-- name: claim_third_lanes
third_lanes

-- name: claim_walk_columns
-- The columns a claim's walk reads of a ready row (`r`): the claimed snapshot's body and
-- the row's place.
r.slot, r.fact_id, r.job_id, r.run_at, r.run_lease, r.priority, r.shard, r.kind, r.queue,
    r.args, r.attempt, r.max_attempts, r.finalized_at, r.created_at, r.errors, r.metadata,
    r.tags, r.unique_key, r.unique_states, r.callback_id, r.callback_timeout_at,
    r.progress, r.lane_seq

-- name: claim_effective
-- The aged priority of a walked row `f` at the claim's `now`: its priority less one per
-- `aging_us` microseconds it has been due, never below 1 (PriorityAging).
CASE WHEN %(aging_us)s::bigint > 0 AND %(now)s::timestamptz > f.run_at
    THEN greatest(1, f.priority - div(
        extract(epoch FROM %(now)s::timestamptz - f.run_at) * 1000000,
        %(aging_us)s::bigint))
    ELSE f.priority END

-- name: claim_in_slot
-- The claim as one ring slot's statement: it reads and writes that slot's partitions by
-- name, never the ring's partitioned parents, so prune's swap of another slot neither
-- makes it wait (prune locks the parents ONLY, and the partitions of its own slot) nor
-- makes it plan again (a swap invalidates the plans that read the parents or the swapped
-- partitions, not those reading a sibling). The engine runs it on the slot where the
-- queue's last claims found their rows, which is the current slot when workers keep up
-- and the backlog's slot when they drain one.
-- It claims only when the slot holds, for every lane it locked, each position from the
-- lane's cursor up to its last row taken: `elsewhere` reports a lane whose window
-- reaches into another slot (a producer that wrote to the previous slot just after a
-- rotation, carried-forward rows, a backlog older than the slot). It then claims and
-- moves nothing, and the engine runs the claim over the whole ring, so FIFO per lane and
-- order across lanes are those of `claim`. `current_slot` is the ring's current slot, to
-- try next; `next_slot` the one the ring rotates into next, whose statement the engine
-- plans ahead once the current slot changed (Claims._warm_next).
{claim_body ready_entries=slot_ready_entries claims=slot_claims tombstones=slot_tombstones
    walk_position=slot_walk_position refused_elsewhere=slot_refused_elsewhere
    or_elsewhere=slot_or_elsewhere slot_outputs=in_slot_outputs slot_columns=in_slot_columns}

-- name: ring_ready_entries
{s}.ready_entries

-- name: ring_claims
{s}.claims

-- name: ring_tombstones
{s}.tombstones

-- name: slot_ready_entries
{ready_entries_k}

-- name: slot_claims
{claims_k}

-- name: slot_tombstones
{tombstones_k}

-- name: slot_walk_position
, row_number() OVER (ORDER BY r.lane_seq) AS rn

-- name: slot_refused_elsewhere
-- claim_in_slot's `elsewhere`, over its three walks.
, {slot_walks_elsewhere walks=claim_merged_walks walked=claim_picked} AS elsewhere

-- name: slot_walks_elsewhere
-- Whether a walk of a lane (`walks`: queue, priority, shard, next_seq, pass, walk_from,
-- share; its rows in `walked`, numbered `rn`) reads past ring slot k: when the walk
-- filled its share, every position from where it began to its last row is in this slot
-- when that row's position equals the beginning plus the rows walked before it
-- (positions are unique and increase along the walk); otherwise the walk saw all the
-- lane's rows here from where it began, and the slot must hold every position from there
-- to the lane's end (next_seq is committed with the rows below it).
EXISTS (
    SELECT 1 FROM {walks} h
    CROSS JOIN LATERAL (
        SELECT count(*) AS n, max(p.rn) AS last_rn, max(p.lane_seq) AS last_seq
        FROM {walked} p
        WHERE p.priority = h.priority AND p.shard = h.shard AND p.pass = h.pass) g
    WHERE CASE
        WHEN g.n >= h.share THEN g.last_seq <> h.walk_from + g.last_rn - 1
        ELSE (SELECT count(*) FROM {ready_entries_k} r
              WHERE r.queue = h.queue AND r.priority = h.priority AND r.shard = h.shard
                AND r.lane_seq >= h.walk_from AND r.lane_seq < h.next_seq)
            <> h.next_seq - h.walk_from
        END)

-- name: claim_merged_walks
-- The lanes of claim_body's three walks.
(SELECT * FROM first_lanes UNION ALL SELECT * FROM second_lanes
                   UNION ALL SELECT * FROM third_lanes WHERE share > 0)

-- name: claim_picked
picked

-- name: claim_lone_lanes
lone

-- name: claim_lone_walked
walked

-- name: slot_or_elsewhere
 OR elsewhere

-- name: in_slot_outputs
,
        (SELECT elsewhere FROM refused) AS elsewhere,
        -- claim_lone_in_slot would have done: no lane locked is sorted or keyed, and
        -- one lane was locked or their rows past the cursors fit in the batch.
        (SELECT NOT coalesce(bool_or(disordered), false)
            AND NOT coalesce(bool_or(shard >= %(keyed_base)s), false)
            AND (count(*) <= 1 OR sum(next_seq - claim_seq) <= %(limit)s) FROM heads) AS lone,
        (SELECT current_slot FROM {s}.ring_state) AS current_slot,
        (SELECT (current_slot + 1) %% slot_count FROM {s}.ring_state) AS next_slot

-- name: in_slot_columns
, m.elsewhere, m.lone, m.current_slot, m.next_slot

-- name: explain_claim
-- Plans the claim on a new backend without claiming anything (warm_up).
EXPLAIN {claim}

-- name: claim_sorted
-- The general claim; `claim` is this statement for windows in lane order or taken whole,
-- used while no lane of the queue holds a longer sorted window.
-- Unless the queue is paused, lock the lane heads nobody else is claiming from and take
-- the best unclaimed rows of their windows (lane_seq >= cursor). A window appended in (run_at, job id) order is
-- walked along the lane index and stops after `limit` rows; only a window that still
-- holds an out-of-order row is sorted. Within one lane the aged priority only improves
-- with age, so each lane's first `limit` rows by (run_at, job id) contain the answer.
-- Aging uses integer microseconds, exactly like the Python PriorityAging. On the walk,
-- OFFSET 0 keeps each NOT EXISTS a per-row index probe (the planner would otherwise
-- build a join against a whole partition when its statistics are stale).
-- The same statement moves the cursor of every ordered lane it took rows from: there the
-- rows taken are a prefix of the lane's unclaimed rows in lane order (a lane has one
-- priority, its window is in (run_at, job id) order and aging only favours older rows),
-- so every row below the last one taken is claimed or tombstoned. Sorted (disordered)
-- windows are left to advance_cursors.
{claim_sorted_body key_window=key_window_cte_comma keyed_heads=window_heads
    key_cursor=key_window_cursor lane_limit=sorted_lane_limit key_rank=nothing room=nothing
    by_key_rank=nothing ready_entries=ring_ready_entries claims=ring_claims
    tombstones=ring_tombstones walk_position=nothing slot_guard_cte=nothing in_slot_only=nothing
    elsewhere_output=no_elsewhere}

-- name: sorted_lane_limit
%(limit)s

-- name: sorted_walk_columns
-- The columns claim_sorted_body's walks read of a ready row (`r`).
r.slot, r.fact_id, r.job_id, r.run_at, r.run_lease, r.priority, r.shard, r.kind,
                 r.queue, r.args, r.attempt, r.max_attempts, r.finalized_at, r.created_at,
                 r.errors, r.metadata, r.tags, r.unique_key, r.unique_states,
                 r.callback_id, r.callback_timeout_at, r.progress, r.lane_seq

-- name: limited_slot_check
-- claim_limited_in_slot's test that slot k held every row its walk of each lane would
-- read over the whole ring (as claim_in_slot's `elsewhere`): when a lane's walk filled
-- its share, the positions from the cursor to its last row are all in the slot when
-- that row's position is the cursor plus the rows before it (`rn`; positions are unique
-- in the ring and increase along the walk; carry-forward copies a row and swaps its old
-- slot out in one transaction); otherwise the slot must hold every position from the
-- cursor to the lane's end (next_seq is committed with the rows below it). A sorted
-- window is left to the claim over the whole ring.
slot_check AS (
    SELECT EXISTS (
        SELECT 1
        FROM (SELECT * FROM heads WHERE NOT contested) h
        LEFT JOIN (
            SELECT p.priority, p.shard, count(*) AS n, max(p.rn) AS last_rn,
                max(p.lane_seq) AS last_seq
            FROM picked p
            GROUP BY p.priority, p.shard) g
            ON g.priority = h.priority AND g.shard = h.shard
        WHERE h.disordered
           OR CASE WHEN coalesce(g.n, 0) >= {limited_lane_limit}
                  THEN g.last_seq <> h.claim_seq + g.last_rn - 1
                  ELSE (SELECT count(*) FROM {ready_entries_k} r
                        WHERE r.queue = h.queue AND r.priority = h.priority
                          AND r.shard = h.shard AND r.lane_seq >= h.claim_seq
                          AND r.lane_seq < h.next_seq)
                      <> h.next_seq - h.claim_seq
              END) AS elsewhere
),

-- name: limited_slot_not_elsewhere
-- Nothing is claimed in slot k when a lane's rows are not all there (limited_slot_check):
-- the engine then claims over the whole ring (claim_limited).
AND NOT (SELECT elsewhere FROM slot_check)

-- name: limited_slot_elsewhere
(SELECT elsewhere FROM slot_check)

-- name: no_elsewhere
false

-- name: claim_sorted_body
-- The statement of claim_sorted, and of claim_limited with its slots filled.
WITH {key_window} heads AS (
    {claim_heads}
), picked AS (
    SELECT w.*, h.disordered
    FROM (SELECT * FROM heads WHERE NOT contested) h
    CROSS JOIN LATERAL (
        (SELECT o.* FROM (
             SELECT {sorted_walk_columns}{walk_position}
             FROM {ready_entries} r
             WHERE NOT h.disordered
               AND r.queue = h.queue AND r.priority = h.priority AND r.shard = h.shard
               AND r.lane_seq >= h.claim_seq AND r.run_at <= %(now)s
             ORDER BY r.lane_seq
             OFFSET 0) o
         WHERE NOT EXISTS (
               SELECT 1 FROM {claims} c WHERE c.slot = o.slot AND c.ready_fact = o.fact_id
               OFFSET 0)
           AND NOT EXISTS (
               SELECT 1 FROM {tombstones} t
               WHERE t.slot = o.slot AND t.ready_fact = o.fact_id OFFSET 0)
         ORDER BY o.lane_seq
         LIMIT {lane_limit})
        UNION ALL
        (SELECT o.* FROM (
             SELECT {sorted_walk_columns}{walk_position}
             FROM {ready_entries} r
             WHERE h.disordered
               AND r.queue = h.queue AND r.priority = h.priority AND r.shard = h.shard
               AND r.lane_seq >= h.claim_seq AND r.run_at <= %(now)s
             OFFSET 0) o
         WHERE NOT EXISTS (
               SELECT 1 FROM {claims} c WHERE c.slot = o.slot AND c.ready_fact = o.fact_id)
           AND NOT EXISTS (
               SELECT 1 FROM {tombstones} t
               WHERE t.slot = o.slot AND t.ready_fact = o.fact_id)
         ORDER BY o.run_at, o.job_id
         LIMIT {lane_limit})
    ) w
), {slot_guard_cte} candidates AS (
    SELECT p.* FROM (
        SELECT p.*{key_rank}
        FROM (
            SELECT p.*,
                CASE WHEN %(aging_us)s::bigint > 0 AND %(now)s::timestamptz > p.run_at
                    THEN greatest(1, p.priority - div(
                        extract(epoch FROM %(now)s::timestamptz - p.run_at) * 1000000,
                        %(aging_us)s::bigint))
                    ELSE p.priority END AS effective
            FROM picked p) p) p
    {room} {in_slot_only}
    ORDER BY {by_key_rank}p.effective, p.run_at, p.job_id
    LIMIT %(limit)s
), inserted AS (
    {claim_inserted}
), advanced AS (
    UPDATE {s}.claim_heads h SET claim_seq = a.next_seq
    FROM (SELECT c.priority, c.shard, max(c.lane_seq) + 1 AS next_seq
          FROM candidates c
          WHERE NOT c.disordered
          GROUP BY c.priority, c.shard) a
    WHERE h.queue = %(queue)s AND h.priority = a.priority AND h.shard = a.shard
      AND a.next_seq > h.claim_seq
), mixed AS (
    -- Whether the next claim needs this statement again (see claim): a sorted window
    -- longer than this batch (claim takes only whole ones).
    SELECT EXISTS (SELECT 1 FROM heads
                   WHERE disordered AND next_seq - claim_seq > %(limit)s)
        OR EXISTS (SELECT 1 FROM picked p
                   WHERE p.unique_key IS NOT NULL AND p.unique_states IS NOT NULL
                     AND get_bit(p.unique_states, 1) <> get_bit(p.unique_states, 2))
        AS mixed,
        -- A lane was left alone (see heads): the engine claims again at once.
        EXISTS (SELECT 1 FROM heads WHERE contested) AS contested,
        {key_cursor} AS key_cursor,
        {elsewhere_output} AS elsewhere,
        {quiet_commit} AS quiet
), claimed AS (
    -- The claimed snapshots, exactly as the job_facts view resolves an open receipt
    -- without a lease, so the claimer needs no second read (the walk carried the bodies).
    SELECT i.slot, i.claim_id, i.ready_fact, i.job_id, c.priority, c.shard,
        c.job_id AS id, c.kind, c.queue, c.args, 'running' AS state,
        (c.attempt + 1)::smallint AS attempt, c.max_attempts, c.run_at,
        %(now)s::timestamptz AS heartbeat_at, %(deadline_at)s::timestamptz AS deadline_at,
        %(now)s::timestamptz AS attempted_at, c.finalized_at, c.created_at, c.errors,
        c.metadata, c.tags, c.unique_key, c.unique_states, c.callback_id,
        c.callback_timeout_at, c.run_lease + 1 AS run_lease, c.progress, c.disordered,
        c.effective
    FROM inserted i
    JOIN candidates c ON c.slot = i.slot AND c.fact_id = i.ready_fact
)
-- One row even when nothing was claimed (id NULL), so `mixed` and `contested` always
-- come back.
SELECT r.*, m.mixed, m.contested, m.key_cursor, m.elsewhere
FROM mixed m LEFT JOIN claimed r ON true
ORDER BY r.effective, r.run_at, r.job_id

-- name: claim_limited
-- claim_sorted under a per-key limit (ADR 0029), in the transaction that first locked the
-- keys of the lanes it may take from and counted their live attempts: a keyed lane (a
-- concurrency key's own, shard >= keyed_base) is visited only when it is in the room
-- (room_of: the rotation's window, with room), at most its room is taken from the key's lanes
-- (ranked in the claim's order, so each lane's take is a prefix), and the batch takes
-- every key's first job before any key's second.
{claim_sorted_body key_window=nothing keyed_heads=limited_heads key_cursor=no_key_cursor
    lane_limit=limited_lane_limit key_rank=limited_key_rank room=limited_room
    by_key_rank=limited_by_key_rank ready_entries=ring_ready_entries claims=ring_claims
    tombstones=ring_tombstones walk_position=nothing slot_guard_cte=nothing in_slot_only=nothing
    elsewhere_output=no_elsewhere}

-- name: claim_limited_in_slot
-- claim_limited in ring slot k, its partitions read by name and no ring parent (so it
-- neither plans nor locks the ring's other partitions):
-- claim_sorted under a per-key limit, which claims nothing and reports `elsewhere` when
-- a lane's rows its walk would read over the whole ring are not all in slot k
-- (limited_slot_check); the engine then runs claim_limited in the same transaction, so
-- the rows taken are claim_limited's. The engine names the slot where the queue's last
-- claims found their rows.
{claim_sorted_body key_window=nothing keyed_heads=limited_heads key_cursor=no_key_cursor
    lane_limit=limited_lane_limit key_rank=limited_key_rank room=limited_room
    by_key_rank=limited_by_key_rank ready_entries=slot_ready_entries claims=slot_claims
    tombstones=slot_tombstones walk_position=slot_walk_position slot_guard_cte=limited_slot_check
    in_slot_only=limited_slot_not_elsewhere elsewhere_output=limited_slot_elsewhere}

-- name: limited_lane_limit
-- A keyed lane's walk reads no more than its key's room: the key's best `free` rows over
-- its lanes are among the first `free` of each.
least(%(limit)s, coalesce({room_of key=lane_shard}, %(limit)s))

-- name: lane_shard
h.shard

-- name: row_shard
p.shard

-- name: room_of
-- The room of the key `key` (a shard): its free slots (room_free_set) at its place among
-- the keys a limited claim may take from (room_shards_set), NULL for a key not among
-- them. Found in the arrays themselves (array_position), once per lane or row: an unnest
-- of the pairs per lane read every pair again for every lane.
({room_free_set})[array_position({room_shards_set}, {key})]

-- name: room_shards_set
-- The keys a limited claim may take from, as this transaction's count of the walked keys
-- (live_of_walk) or the engine (set_room) left them (with their room, room_free_set):
-- transaction-local settings, so the claim can be sent in the same pipeline as the count
-- it depends on. Read once per statement (an init plan: a setting cast where a row is
-- filtered is read and parsed again for every row).
(SELECT current_setting('awa.room_shards')::int[])::int[]

-- name: room_free_set
(SELECT current_setting('awa.room_free')::int[])::int[]

-- name: limited_heads
-- No lane at all when the window of keys is not whole (`awa.room_whole`: the count found
-- keys at their limit among a full first walk, so the window needs further walks, which
-- the engine makes before it claims again in the same transaction).
      AND (SELECT current_setting('awa.room_whole')::boolean)
      AND (h.shard < %(keyed_base)s
           OR h.shard = ANY({room_shards_set}))

-- name: limited_key_rank
, CASE WHEN p.shard >= %(keyed_base)s
            THEN row_number() OVER (
                PARTITION BY p.shard ORDER BY p.effective, p.run_at, p.job_id)
            ELSE 1 END AS key_rank

-- name: limited_room

    WHERE p.key_rank <= coalesce({room_of key=row_shard}, 2147483647)

-- name: limited_by_key_rank
p.key_rank,

-- name: keyed_lanes_with_work
-- The keyed lanes (a concurrency key's own, ADR 0029) with rows past their cursor, one row
-- per key, in the rotation (keyed_rotation), leaving out the shards in `walked` (the
-- claim's earlier walks, KeyWindow); at most `limit` (the keys the walk still wants).
{keyed_rotation walked_out=keyed_walked_out}

-- name: keyed_lanes_locked
-- keyed_lanes_with_work and the keys' transaction-scoped locks (by their lane's shard,
-- across priorities) in one statement, for a claim's first walk: the locks are taken in
-- sorted order, so claimers never deadlock, waited for, and the walk's keys returned in
-- rotation order (one row with a NULL shard when the walk found none). The count that
-- follows is a statement of its own, so it starts after the locks are held; the keys
-- walked are left in the transaction-local setting `awa.walked_keys` for it
-- (live_of_walk), so it can be sent in the same pipeline, without waiting for these rows.
WITH walked AS ({keyed_rotation walked_out=keyed_walked_out}), locked AS (
    SELECT count(pg_advisory_xact_lock(
        hashtextextended('awa.concurrency:{s}:' || %(queue)s || ':' || k.shard, 0))) AS n
    FROM (SELECT w.shard FROM walked w ORDER BY w.shard) k
)
SELECT w.shard
FROM (SELECT set_config('awa.walked_keys',
          coalesce((SELECT array_agg(w.shard) FROM walked w), '{}'::int[])::text, true)
      ) noted
LEFT JOIN (SELECT w.shard FROM walked w CROSS JOIN locked) w ON true
ORDER BY w.shard <= %(key_after)s, w.shard

-- name: keyed_walked_out
AND NOT h.shard = ANY(%(walked)s::int[])

-- name: keyed_rotation
-- The keyed lanes (a concurrency key's own, shard >= keyed_base; ADR 0029) with rows past
-- their cursor, one row per key, in the claimer's rotation: first those after
-- `key_after` (the key this process's last claim of the queue walked to), then from the
-- first again; at most `limit`. Each priority's heads are read in shard order from where
-- the rotation starts (keyed_run) and only until `limit` keys with work are found, so a
-- walk reads about the keys it returns, not every keyed head of the queue; a key of
-- several priorities is one row. The keys from the first again are read only when
-- those after the cursor are fewer than `limit`.
WITH after_cursor AS (
    SELECT DISTINCT a.shard
    FROM unnest('{1,2,3,4}'::smallint[]) AS p(priority)
    CROSS JOIN LATERAL ({keyed_run from_key=keyed_after_cursor}) a
)
SELECT k.shard FROM (
    SELECT a.shard, false AS wrapped FROM after_cursor a
    UNION ALL
    SELECT DISTINCT b.shard, true AS wrapped
    FROM unnest('{1,2,3,4}'::smallint[]) AS p(priority)
    CROSS JOIN LATERAL ({keyed_run from_key=keyed_from_first}) b
    WHERE (SELECT count(*) FROM after_cursor) < %(limit)s
) k
ORDER BY k.wrapped, k.shard
LIMIT %(limit)s

-- name: keyed_run
-- One priority's (p) keyed lanes with rows past their cursor from `from_key` on, in
-- shard order (the claim_heads key), at most `limit`.
-- The lane is probed per head (OFFSET 0 keeps it a probe by the whole lane key: as a
-- join the planner matched lanes by queue and priority alone, every lane per head).
SELECT h.shard
FROM {s}.claim_heads h
WHERE h.queue = %(queue)s AND h.priority = p.priority {from_key}
  AND EXISTS (
      SELECT 1 FROM {s}.lanes l
      WHERE l.queue = h.queue AND l.priority = h.priority AND l.shard = h.shard
        AND l.next_seq > h.claim_seq
      OFFSET 0)
  {walked_out}
ORDER BY h.shard
LIMIT %(limit)s

-- name: keyed_after_cursor
AND h.shard > %(key_after)s AND h.shard >= %(keyed_base)s

-- name: keyed_from_first
AND h.shard >= %(keyed_base)s AND h.shard <= %(key_after)s

-- name: key_window_cte
-- The keyed lanes a claim without a per-key limit visits (ADR 0029, "Keyed lanes without
-- a limit"): the next `limit` keys of the rotation. Each key with work is a lane of its
-- own, so walking every one of them would cost a claim locks and rows in the number of
-- keys; a window of the batch's size rotates over them instead, as the limited claim's
-- does, and a key waits at most `ceil(keys with work / batch)` claims of one claimer.
key_window AS ({keyed_rotation walked_out=nothing})

-- name: key_window_cte_comma
{key_window_cte},

-- name: window_heads
-- A lane heads reads: every lane without a concurrency key, and the keyed lanes of the
-- window (key_window_cte).
AND (h.shard < %(keyed_base)s OR h.shard IN (SELECT w.shard FROM key_window w))

-- name: keyless_heads
-- The lanes claim_lone_in_slot's heads read: those without a concurrency key.
AND h.shard < %(keyed_base)s

-- name: keyed_lanes_with_rows
-- Whether a keyed lane (a concurrency key's, ADR 0029) of the queue has rows past its
-- cursor: claim_lone_in_slot leaves the queue to claim_in_slot's window of keys then.
SELECT 1 FROM {s}.claim_heads h
WHERE h.queue = %(queue)s AND h.shard >= %(keyed_base)s
  AND EXISTS (
      SELECT 1 FROM {s}.lanes l
      WHERE l.queue = h.queue AND l.priority = h.priority AND l.shard = h.shard
        AND l.next_seq > h.claim_seq
      OFFSET 0)

-- name: key_window_cursor
-- The window's last key in rotation order, where the claimer's next claim starts after
-- (NULL: no keyed lane has work).
(SELECT w.shard FROM key_window w
 ORDER BY w.shard <= %(key_after)s DESC, w.shard DESC LIMIT 1)

-- name: no_key_cursor
NULL::int

-- name: try_lock_keyed_lanes
-- The keys' locks for a later walk of the same claim (KeyWindow): tried, never waited
-- for, since this claim already holds the first walk's locks and waiting here could close
-- a circle with another claimer; a key another claimer holds is left to it. Returns the
-- shards locked.
SELECT k AS shard
FROM unnest(%(shards)s::int[]) AS k
WHERE pg_try_advisory_xact_lock(
    hashtextextended('awa.concurrency:{s}:' || %(queue)s || ':' || k, 0))

-- name: live_per_keyed_lane
-- Each keyed lane's live attempts (ADR 0029, "Counting a key's live attempts"): its ready
-- rows with an open claim, a claim without a closure (running, or waiting_external when
-- its lease waits), as the job_facts view reads them; and the lane's low-water mark,
-- the position below which every row is claimed and closed or tombstoned (the first
-- open claim, else the cursor). Only rows that can hold an open claim are read: from the
-- claimer's last mark of the lane (`mark_*`; a mark past the cursor is not this lane's
-- and is not used), and below the claim cursor, the rows past it only while the window
-- past it is sorted (disorder_seq at or past the cursor). An ordered window is claimed
-- as a prefix and its cursor moved in the same statement, and a sorted window's claim
-- moves the cursor over its claimed prefix in its transaction, leaving claims past the
-- cursor only below a row appended out of order (the later rows rank after the lane's
-- tail). A row below a mark stays closed: claims are made at or past the cursor, and a
-- closed claim never opens again. The caller holds the keys' locks, so the cursors read
-- are those of every claim of these keys committed before.
{live_body keys=given_keys lane_count=live_in_ring}

-- name: live_per_keyed_lane_in_slot
-- live_per_keyed_lane reading ring slot k's partitions by name (live_in_slot).
{live_body keys=given_keys lane_count=live_in_slot}

-- name: given_keys
%(shards)s::int[]

-- name: walked_keys
-- Read once per statement (room_shards_set; the cast makes it an array, not a subquery, in ANY).
(SELECT current_setting('awa.walked_keys')::int[])::int[]

-- name: live_body
-- live_per_keyed_lane of the keys its `keys` slot names (given_keys, walked_keys); each
-- lane's rows that can hold an open claim are positions [lo, hi), counted by its
-- `lane_count` (live_in_ring, live_in_slot), which says whether it read them all
-- (`in_slot`).
SELECT h.priority, h.shard, c.live, least(c.first_open, h.claim_seq) AS mark, c.in_slot
FROM {s}.claim_heads h
JOIN {s}.lanes l USING (queue, priority, shard)
CROSS JOIN LATERAL (
    SELECT coalesce(
               (SELECT k.seq
                FROM (SELECT ({mark_map} ->> (h.priority || '/' || h.shard))::bigint AS seq
                      OFFSET 0) k
                WHERE k.seq <= h.claim_seq),
               0) AS lo,
           CASE WHEN l.disorder_seq >= h.claim_seq THEN l.next_seq
                ELSE h.claim_seq END AS hi
    OFFSET 0) b
CROSS JOIN LATERAL ({lane_count}) c
WHERE h.queue = %(queue)s
  -- Only the priorities the queue has keyed lanes of (a probe each): each one is a probe
  -- per key.
  AND h.priority = ANY((
      SELECT array_agg(p.priority) FROM unnest('{1,2,3,4}'::smallint[]) AS p(priority)
      WHERE EXISTS (
          SELECT 1 FROM {s}.claim_heads x
          WHERE x.queue = %(queue)s AND x.priority = p.priority
            AND x.shard >= (SELECT min(k) FROM unnest({keys}) AS k)
          OFFSET 0))::smallint[])
  AND h.shard = ANY({keys})

-- name: live_of_lane
-- A lane's rows at positions [b.lo, b.hi) in `ready_entries` (h: its claim head): how
-- many there are (`n`), how many hold an open claim (`live`: a claim without a closure,
-- and no tombstone) and the first of those (`first_open`).
SELECT count(*) AS n, count(*) FILTER (WHERE o.open) AS live,
    min(o.lane_seq) FILTER (WHERE o.open) AS first_open
FROM (
    SELECT r.lane_seq,
        EXISTS (
            SELECT 1 FROM {claims} c
            WHERE c.slot = r.slot AND c.ready_fact = r.fact_id
              AND NOT EXISTS (
                  SELECT 1 FROM {closures} x
                  WHERE x.slot = c.slot AND x.claim_id = c.claim_id OFFSET 0)
            OFFSET 0)
        AND NOT EXISTS (
            SELECT 1 FROM {tombstones} t
            WHERE t.slot = r.slot AND t.ready_fact = r.fact_id OFFSET 0) AS open
    FROM {ready_entries} r
    WHERE r.queue = h.queue AND r.priority = h.priority AND r.shard = h.shard
      AND r.lane_seq >= b.lo AND r.lane_seq < b.hi
    OFFSET 0) o

-- name: live_in_ring
-- A lane's count over the whole ring, through the partitioned parents: a probe of every
-- ring partition per lane.
SELECT g.live, g.first_open, true AS in_slot
FROM ({live_of_lane ready_entries=ring_ready_entries claims=ring_claims
        closures=ring_closures tombstones=ring_tombstones}) g

-- name: live_in_slot
-- A lane's count in ring slot k alone: its partitions by name, one probe per lane. It is
-- the lane's count when slot k holds every position of [lo, hi) (`in_slot`; positions
-- are unique in the ring: carry-forward copies a row and swaps its old slot out in one
-- transaction); otherwise the engine counts the keys again over the whole ring. The
-- slot is where the queue's last claims found their rows, which holds the rows a lane's
-- last claim took (the range from its mark). The statement names no ring parent, so it
-- neither plans nor locks the ring's other partitions.
SELECT s.live, s.first_open, s.n = b.hi - b.lo AS in_slot
FROM ({live_of_lane ready_entries=slot_ready_entries claims=slot_claims
        closures=slot_closures tombstones=slot_tombstones}) s

-- name: mark_map
-- The claimer's marks (`marks`: a JSON object of each lane's mark keyed `priority/shard`,
-- the text the engine writes), read once per statement (an init plan), so each lane
-- finds its mark by key (a binary search) however many marks come: a claimer sends those
-- of the keys its walk will most likely return, a few times a batch of them. One text
-- parameter: three arrays of a few hundred integers each cost the client about as much
-- to send as the rest of the claim, and the server an aggregate to build the object.
(SELECT %(marks)s::jsonb)

-- name: live_of_walk
{live_of_walk_body lane_count=live_in_ring}

-- name: live_of_walk_in_slot
-- live_of_walk reading ring slot k's partitions by name (live_in_slot).
{live_of_walk_body lane_count=live_in_slot}

-- name: live_of_walk_body
-- live_per_keyed_lane of the keys a claim's first walk locked (keyed_lanes_locked, the
-- statement before it in the same pipeline: `awa.walked_keys`), and from it the room
-- the claim that follows reads (room_of, limited_heads): each walked key's free
-- slots, `per_key` (max_running_per_key) less its live attempts, for the keys with any,
-- and whether the window is whole (KeyWindow's rule for a first walk of `limit` keys:
-- fewer came back, so the rotation has no more, or `limit` of them have room), and not
-- when a lane's count did not read all its rows (`in_slot`, live_in_slot: the engine
-- then counts again over the ring, and the claim sent with this takes nothing). Each
-- lane's row, and one row more with a NULL shard; every row carries `whole`.
WITH live AS ({live_body keys=walked_keys}), key_room AS MATERIALIZED (
    SELECT k.shard, (%(per_key)s::bigint - coalesce(sum(l.live), 0))::int AS free
    FROM unnest({walked_keys}) AS k(shard)
    LEFT JOIN live l ON l.shard = k.shard
    GROUP BY k.shard
), room AS (
    SELECT set_config('awa.room_shards',
               coalesce(array_agg(k.shard ORDER BY k.shard) FILTER (WHERE k.free > 0),
                        '{}'::int[])::text, true) AS shards,
           set_config('awa.room_free',
               coalesce(array_agg(k.free ORDER BY k.shard) FILTER (WHERE k.free > 0),
                        '{}'::int[])::text, true) AS free,
           set_config('awa.room_whole',
               ((SELECT coalesce(bool_and(l.in_slot), true) FROM live l)
                AND (count(*) < %(limit)s
                     OR count(*) FILTER (WHERE k.free > 0) >= %(limit)s))::text,
               true)::boolean AS whole
    FROM key_room k
)
SELECT r.whole, l.priority, l.shard, l.live, l.mark, l.in_slot
FROM room r LEFT JOIN live l ON true

-- name: set_room
-- The room of a limited claim as the engine worked it out (further walks of the window,
-- per-key rate limiters), for the claim that follows in the same pipeline (room_of).
SELECT set_config('awa.room_shards', %(room_shards)s::int[]::text, true),
    set_config('awa.room_free', %(room_free)s::int[]::text, true),
    set_config('awa.room_whole', 'true', true)

-- name: contested_claims
-- Rows claim_sorted just claimed from sorted windows that another claimer claimed, or a
-- cancel tombstoned, in between that statement's snapshot and its lock of the lane
-- head: a sorted window does not move its cursor past what was taken, so the walk,
-- reading under the older snapshot, could not see the other's rows. This statement
-- runs after the lane locks are held, so its snapshot sees every such commit.
SELECT i.claim_id
FROM unnest(%(slots)s::int[], %(facts)s::bigint[], %(claims)s::bigint[])
    AS i(slot, ready_fact, claim_id)
WHERE EXISTS (SELECT 1 FROM {s}.claims c
              WHERE c.slot = i.slot AND c.ready_fact = i.ready_fact
                AND c.claim_id <> i.claim_id)
   OR EXISTS (SELECT 1 FROM {s}.tombstones t
              WHERE t.slot = i.slot AND t.ready_fact = i.ready_fact)
LIMIT 1

-- name: advance_cursors
-- Move each touched lane's cursor over its now contiguous claimed / tombstoned prefix,
-- and mark the lane as a retiring writer does (ADR 0006, "Retiring unclaimed rows"):
-- rows claimed here may sit above the cursor, where a claimer whose snapshot predates
-- this commit cannot see them; the mark turns it away from the lane instead of letting
-- it take them again.
-- Rows of transactions still in flight sit above the committed next_seq, so the cursor
-- can never pass them. Both probes walk the (lane, lane_seq) index; OFFSET 0 keeps the
-- NOT EXISTS checks per-row index probes.
WITH touched AS (
    SELECT DISTINCT q AS queue, p AS priority, sh AS shard
    FROM unnest(%(queues)s::text[], %(priorities)s::smallint[], %(shards)s::int[])
        AS i(q, p, sh)
), target AS (
    SELECT h.queue, h.priority, h.shard, h.claim_seq, coalesce(
        (SELECT r.lane_seq FROM {s}.ready_entries r
         WHERE r.queue = h.queue AND r.priority = h.priority AND r.shard = h.shard
           AND r.lane_seq >= h.claim_seq
           AND NOT EXISTS (SELECT 1 FROM {s}.claims c
                           WHERE c.slot = r.slot AND c.ready_fact = r.fact_id OFFSET 0)
           AND NOT EXISTS (SELECT 1 FROM {s}.tombstones t
                           WHERE t.slot = r.slot AND t.ready_fact = r.fact_id OFFSET 0)
         ORDER BY r.lane_seq LIMIT 1),
        (SELECT r.lane_seq + 1 FROM {s}.ready_entries r
         WHERE r.queue = h.queue AND r.priority = h.priority AND r.shard = h.shard
           AND r.lane_seq >= h.claim_seq
         ORDER BY r.lane_seq DESC LIMIT 1),
        h.claim_seq) AS new_seq
    FROM {s}.claim_heads h JOIN touched USING (queue, priority, shard)
)
UPDATE {s}.claim_heads h SET claim_seq = greatest(h.claim_seq, t.new_seq),
    retired_xid = pg_current_xact_id()
FROM target t
WHERE h.queue = t.queue AND h.priority = t.priority AND h.shard = t.shard
