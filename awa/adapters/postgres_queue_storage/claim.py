"""Claims: a worker takes ready rows by appending receipts.

The common claim is one statement on a kept connection (``claim``: it claims, moves the
lane cursors and counts); a queue whose last claim met a lane window that must be sorted
takes the transactional path (``claim_sorted``) until its windows are in order again.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import weakref
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import attrs
from psycopg.types.numeric import Int8

from awa.adapters._pg.arrays import Int8s
from awa.adapters._pg.decode import fetch_decodable
from awa.adapters._pg.errors import translated_errors
from awa.adapters._pg.pool import DictConnection
from awa.adapters._pg.rate_limits import HeldLimiters, key_allowances, lock_limiters
from awa.adapters.postgres_queue_storage.connections import (
    KEPT_CONNECTIONS,
    Connections,
    settled,
)
from awa.adapters.postgres_queue_storage.facts import FactWriter
from awa.adapters.postgres_queue_storage.receipts import ReceiptCache
from awa.adapters.postgres_queue_storage.snapshots import Writes, minute_of
from awa.adapters.postgres_queue_storage.statements import Statements, run
from awa.domain.flow_control import KEYED_SHARD_BASE, KeyWindow
from awa.domain.job import Claim, ClaimBatch, JobRecord
from awa.domain.rate_limits import GlobalRateLimit, shard_limiter
from awa.domain.states import JobState, bitstring_to_mask
from awa.ports.clock import Clock

log = logging.getLogger("awa.adapters.postgres_queue_storage")


def _claimed_job(row: dict[str, Any]) -> JobRecord:
    """The running snapshot a claim statement returns, built directly: the column types
    are fixed by the statement, so the generic row converter's checks are not needed."""
    key = row["unique_key"]
    states = row["unique_states"]
    return JobRecord(
        id=row["id"],
        kind=row["kind"],
        queue=row["queue"],
        args=row["args"],
        state=JobState.Running,
        priority=row["priority"],
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        run_at=row["run_at"],
        created_at=row["created_at"],
        heartbeat_at=row["heartbeat_at"],
        deadline_at=row["deadline_at"],
        attempted_at=row["attempted_at"],
        finalized_at=row["finalized_at"],
        errors=tuple(row["errors"] or ()),
        metadata=row["metadata"] if row["metadata"] is not None else {},
        tags=tuple(row["tags"] or ()),
        unique_key=None if key is None else bytes(key),
        unique_states=None if states is None else bitstring_to_mask(states),
        callback_id=row["callback_id"],
        callback_timeout_at=row["callback_timeout_at"],
        run_lease=row["run_lease"],
        progress=row["progress"],
    )


#: How many claim statements one claim() runs when another transaction took one of its
#: rows first (_Contested) or a retiring writer's mark made it leave a lane alone; after
#: that it returns what it has.
_CONTESTED_TRIES = 3


#: The ring-wide claim's key among the statements planned on a kept claim connection.
_RING = -1

#: The first keyed lane's shard, and the key cursor of a claimer that has walked none
#: (the rotation starts at the first key); int8, as every integer parameter of the claim,
#: so its prepared plan keeps one set of parameter types.
_KEYED_BASE = Int8(KEYED_SHARD_BASE)
_NO_KEY = KEYED_SHARD_BASE - 1


def claim_parameters(
    queue: str,
    limit: int,
    now: datetime,
    *,
    aging_us: int = 0,
    deadline_at: datetime | None = None,
    lead: tuple[int, int] = (0, 0),
    key_after: int = _NO_KEY,
) -> dict[str, Any]:
    """The parameters every claim statement without a limit takes: the queue, the batch,
    the claim's time, priority aging in integer microseconds, the attempt deadline, the
    lead lane (priority, shard; (0, 0) is none) and the key cursor the window of keyed
    lanes starts after (``_NO_KEY`` starts at the first key). The integers are always
    int8, so a prepared claim keeps one set of parameter types."""
    return {
        "queue": queue,
        "limit": limit,
        "now": now,
        "aging_us": aging_us,
        "deadline_at": deadline_at,
        "lead_priority": Int8(lead[0]),
        "lead_shard": Int8(lead[1]),
        "keyed_base": _KEYED_BASE,
        "key_after": Int8(key_after),
    }


#: Low-water marks kept per queue before they are dropped and learnt again.
_MAX_MARKS = 100_000
#: A lane's priorities (1-4, as live_per_keyed_lane reads them).
_LANE_PRIORITIES = (1, 2, 3, 4)
#: The marks a piped claim sends with its count (Claims._marks_ahead): those of this many
#: keys per job of the batch. Its first walk returns at most a batch of keys with work
#: after the cursor; the keys in between without work (drained) also have marks.
_MARKS_AHEAD = 4


def _counted_whole(rows: Sequence[dict[str, Any]]) -> bool:
    """Whether a count of keyed lanes read every row it had to (``in_slot``: a count in
    one ring slot, live_in_slot, did not when a lane's rows are not all there)."""
    return all(row["in_slot"] is not False for row in rows)


def _holds(ordered: list[int], value: int) -> bool:
    """Whether the sorted ``ordered`` holds ``value``."""
    at = bisect.bisect_left(ordered, value)
    return at < len(ordered) and ordered[at] == value


@attrs.frozen
class _Limits:
    """The fleet-wide limits a claim applies (ADR 0029)."""

    max_running_per_key: int | None
    rate: GlobalRateLimit | None
    rate_per_key: GlobalRateLimit | None

    @property
    def keyed(self) -> bool:
        """Whether a per-key limit applies (the claim walks the keyed lanes)."""
        return self.max_running_per_key is not None or self.rate_per_key is not None


@attrs.define
class _Walks:
    """The walks of a limited claim's window of keys so far (:meth:`Claims._room`): the
    window, each walked key's free slots, the keys left to another claimer or walked past
    for want of a token, and the key the next walk starts after."""

    window: KeyWindow[int]
    after: int
    free: dict[int, int] = attrs.field(factory=dict)
    # Keys another claimer was claiming (a later walk's lock not got): left to it.
    contended: set[int] = attrs.field(factory=set)
    # Keys with a free slot but no token of their per-key rate limiter: walked past.
    no_token: set[int] = attrs.field(factory=set)


@attrs.frozen
class _Room:
    """The keyed lanes a limited claim may take from, how many from each, the limiters
    it holds, and the keys it passed over (at their limit, or without a token)."""

    shards: list[int]
    free: list[int]
    held: HeldLimiters
    concurrency_limited: int
    rate_limited: int


class _Contested(Exception):
    """claim_sorted took a row another transaction claimed or tombstoned first; the
    transaction is rolled back."""


class Claims:
    """``claim`` and the warm-up of the kept connections."""

    def __init__(
        self,
        *,
        connections: Connections,
        statements: Statements,
        facts: FactWriter,
        receipts: ReceiptCache,
        clock: Clock,
    ) -> None:
        self._connections = connections
        self._sql = statements
        self._facts = facts
        self._receipts = receipts
        self._clock = clock
        # Queues whose last claim met a lane window that must be sorted (claim_sorted).
        self._sorting: set[str] = set()
        # Queues whose last claim in a ring slot locked lanes claim_lone_in_slot does not
        # take (more rows than the batch over several lanes, a sorted window, a keyed
        # lane): their claims run claim_in_slot, the others claim_lone_in_slot.
        self._several: set[str] = set()
        # The ring slot where each queue's last claimed rows were: its next claim tries
        # claim_in_slot there first.
        self._slots: dict[str, int] = {}
        # The ring's current slot as the last claim_in_slot saw it, and the warm-up of the
        # next slot's claim started when it changed (_warm_next).
        self._ring_current: int | None = None
        self._warm_pending: int | None = None
        # Per kept claim connection, the slots whose claim_in_slot this process has run
        # (or planned) on it: a claim of a slot goes to the connection that has it
        # planned, and the next slot is planned ahead on the other one (_warm_slot).
        self._planned: weakref.WeakKeyDictionary[DictConnection, set[int]] = (
            weakref.WeakKeyDictionary()
        )
        self._warming: asyncio.Task[None] | None = None
        # Per queue, the keyed lane (a concurrency key's) this process's last limited
        # claim walked to: the next one starts after it (ADR 0029).
        self._key_cursor: dict[str, int] = {}
        # Per queue, the lane (priority, shard) its last common claim took a whole batch
        # from, and from no other lane: the next claim's first walk reads that lane's
        # whole batch and one row of each other lane (claim_body, first_lanes).
        self._lead: dict[str, tuple[int, int]] = {}
        # Per queue, each keyed lane's (priority, shard) low-water mark as this process's
        # last count of it saw it: every row below it is claimed and closed or tombstoned,
        # so the next count starts there (live_per_keyed_lane).
        self._marks: dict[str, dict[tuple[int, int], int]] = {}
        # Per queue, the keys (shards) of those lanes, sorted: the marks sent ahead of a
        # first walk are those of the next keys after the cursor (_marks_ahead).
        self._marked: dict[str, list[int]] = {}

    async def claim(
        self,
        queue: str,
        *,
        limit: int,
        deadline: timedelta | None = None,
        aging_interval: timedelta | None = None,
        max_running_per_key: int | None = None,
        global_rate_limit: GlobalRateLimit | None = None,
        global_rate_limit_per_key: GlobalRateLimit | None = None,
    ) -> list[Claim]:
        if limit <= 0:
            return []
        now = self._clock.now()
        # Integer microseconds, so the database ages exactly like PriorityAging.
        aging_us = 0 if aging_interval is None else aging_interval // timedelta(microseconds=1)
        deadline_at = None if deadline is None else now + deadline
        # No lead lane is priority 0 (a lane's priority is 1-4); both always int8, so the
        # prepared claim keeps one set of parameter types (its warm-up plan is reused).
        lead_priority, lead_shard = self._lead.get(queue, (0, 0))
        params = claim_parameters(
            queue,
            limit,
            now,
            aging_us=aging_us,
            deadline_at=deadline_at,
            lead=(lead_priority, lead_shard),
            key_after=self._key_cursor.get(queue, _NO_KEY),
        )
        if (
            max_running_per_key is not None
            or global_rate_limit is not None
            or global_rate_limit_per_key is not None
        ):
            # Limited queues always take the transactional claim: the limits are read
            # and moved in the claim's own transaction (ADR 0029). A queue without them
            # pays nothing for this test.
            limits = _Limits(max_running_per_key, global_rate_limit, global_rate_limit_per_key)
            return await self._claim_limited(queue, params, now, deadline_at, limits)
        try:
            return await self._claim(queue, limit, now, deadline_at, params)
        finally:
            self._start_warm_up(params)

    async def _claim_limited(
        self,
        queue: str,
        params: dict[str, Any],
        now: datetime,
        deadline_at: datetime | None,
        limits: _Limits,
    ) -> list[Claim]:
        """The claim of a queue with ``max_running_per_key`` or a fleet-wide rate limit
        (ADR 0029): always the transactional claim (claim_sorted, or claim_limited when
        a per-key limit applies), after the limiters were locked and, for per-key limits,
        the keys of the next keyed lanes with work were locked and their live attempts
        counted, in the same transaction."""
        limit = params["limit"]
        claims = ClaimBatch()
        for _ in range(_CONTESTED_TRIES):
            params["limit"] = limit - len(claims)
            # The count and the claim of a per-key limit read the ring slot where the
            # queue's last claims found their rows (live_in_slot, claim_limited_in_slot),
            # and the whole ring only for a lane whose rows are not all there.
            slot = self._slots.get(queue) if limits.keyed else None
            try:
                got, contested = await self._claim_sorted(
                    queue, params, now, deadline_at, limits=limits, slot=slot
                )
            except _Contested:
                continue
            except Exception:
                # A slot the ring no longer has (installed again with fewer slots) fails
                # this claim only: the next one reads the whole ring.
                if slot is not None and self._slots.get(queue) == slot:
                    del self._slots[queue]
                raise
            claims.extend(got)
            if isinstance(got, ClaimBatch):
                claims.rate_limited = got.rate_limited
                claims.concurrency_limited = got.concurrency_limited
                claims.next_admission = got.next_admission
            if not contested or len(claims) >= limit:
                break
        return claims

    async def _room(
        self,
        conn: DictConnection,
        queue: str,
        limit: int,
        limits: _Limits,
        now: datetime,
        walks: _Walks | None = None,
        slot: int | None = None,
    ) -> _Room:
        """The keyed lanes a limited claim may take from and how many from each: the
        next ``limit`` keys with work and a free slot after the one this process's last
        limited claim walked to (:class:`~awa.domain.flow_control.KeyWindow`: keys at
        their limit, and keys whose per-key rate limiter has no token, are walked past),
        locked, less their live attempts and capped by
        their rate limiters (locked after the keys, the queue's own first). ``walks``:
        the walks already made in this transaction (:meth:`_claim_piped`'s first), which
        this continues. ``slot``: the ring slot the counts read first (:meth:`_live`)."""
        per_key = limits.max_running_per_key
        if walks is None:
            walks = _Walks(KeyWindow(limit), self._key_cursor.get(queue, _NO_KEY))
        window, free, contended, no_token = (
            walks.window,
            walks.free,
            walks.contended,
            walks.no_token,
        )
        after = walks.after
        while (wanted := window.keys_to_walk()) > 0:
            # The first walk of a concurrency limit waits for its keys' locks, in sorted
            # order, in the same statement.
            first_locked = window.walks == 0 and per_key is not None
            rows = await self._sql.exec_prepared(
                conn,
                "keyed_lanes_locked" if first_locked else "keyed_lanes_with_work",
                queue=queue,
                keyed_base=_KEYED_BASE,
                key_after=Int8(after),
                walked=window.walked,
                limit=wanted,
            )
            walked = [int(row["shard"]) for row in rows if row["shard"] is not None]
            if walked:
                after = walked[-1]
            locked = walked
            if walked and per_key is not None:
                if not first_locked:
                    got = await self._sql.exec_prepared(
                        conn, "try_lock_keyed_lanes", queue=queue, shards=sorted(walked)
                    )
                    held_keys = {int(row["shard"]) for row in got}
                    locked = [shard for shard in walked if shard in held_keys]
                    contended.update(shard for shard in walked if shard not in held_keys)
                live = await self._live(conn, queue, locked, slot) if locked else {}
                for shard in walked:
                    free[shard] = 0 if shard in contended else per_key - live.get(shard, 0)
            else:
                for shard in walked:
                    free[shard] = limit
            if walked and limits.rate_per_key is not None:
                # A key whose limiter has no token gives its place in the window to the
                # next key, as a key at its concurrency limit does.
                tokens = await key_allowances(
                    conn,
                    queue,
                    per_key_limit=limits.rate_per_key,
                    key_names=[shard_limiter(shard) for shard in walked],
                    now=now,
                )
                for shard in walked:
                    if free[shard] > 0 and tokens[shard_limiter(shard)] <= 0:
                        no_token.add(shard)
                    free[shard] = min(free[shard], tokens[shard_limiter(shard)])
            window.add(walked, wanted, lambda shard: free[shard])
        if window.cursor is not None:
            self._key_cursor[queue] = window.cursor
        # Each key at its limit holds back at least its next job.
        at_limit = sum(
            1
            for shard, n in free.items()
            if n <= 0 and shard not in contended and shard not in no_token
        )
        shards = sorted(window.with_room)
        held = await lock_limiters(
            conn,
            queue,
            queue_limit=limits.rate,
            per_key_limit=limits.rate_per_key,
            key_names=[shard_limiter(shard) for shard in shards],
            wanted=limit,
            now=now,
        )
        by_rate = len(no_token)
        allowed = held.allowed.per_key
        if allowed is not None:
            for shard in shards:
                capped = min(free[shard], allowed[shard_limiter(shard)])
                by_rate += 1 if capped <= 0 else 0
                free[shard] = capped
        room = [(shard, free[shard]) for shard in shards if free[shard] > 0]
        return _Room(
            shards=[shard for shard, _ in room],
            free=[n for _, n in room],
            held=held,
            concurrency_limited=at_limit,
            rate_limited=by_rate,
        )

    async def _live(
        self, conn: DictConnection, queue: str, shards: list[int], slot: int | None
    ) -> dict[int, int]:
        """The live attempts of each keyed lane in ``shards`` (their keys locked by this
        claim), counted from each lane's low-water mark, which moves up to what the count
        saw (live_per_keyed_lane; in ring slot ``slot`` first, live_in_slot)."""
        marks = self._marks_of(queue, shards)
        rows = await self._sql.exec_prepared_in(
            conn, "live_per_keyed_lane", slot, queue=queue, shards=shards, **marks
        )
        if not _counted_whole(rows):
            # A lane's rows are not all in the slot: count the keys over the whole ring.
            rows = await self._sql.exec_prepared(
                conn, "live_per_keyed_lane", queue=queue, shards=shards, **marks
            )
        return self._note_marks(queue, rows)

    def _marks_of(self, queue: str, shards: Sequence[int]) -> dict[str, str]:
        """The count's ``marks`` parameter: this process's low-water marks of the lanes of
        ``shards``, a JSON object keyed ``priority/shard`` (mark_map)."""
        marks = self._marks.get(queue, {})
        known = ",".join(
            f'"{priority}/{shard}":{seq}'
            for shard in shards
            for priority in _LANE_PRIORITIES
            if (seq := marks.get((priority, shard))) is not None
        )
        return {"marks": "{" + known + "}"}

    def _marks_ahead(self, queue: str, after: int, n: int) -> list[int]:
        """The first ``n`` keys with a low-water mark in the rotation after ``after``
        (then from the first again): the keys a first walk from ``after`` most likely
        returns, whose marks go with the count sent before the walk's rows are back
        (live_of_walk). A walked key without its mark here is counted from its lane's
        start, which is exact, only slower."""
        marked = self._marked.get(queue, [])
        first = bisect.bisect_right(marked, after)
        ahead = marked[first : first + n]
        return ahead + marked[: n - len(ahead)] if len(ahead) < n else ahead

    def _note_marks(self, queue: str, rows: Sequence[dict[str, Any]]) -> dict[int, int]:
        """Each key's live attempts from a count's lane rows (live_per_keyed_lane,
        live_of_walk; a row without a shard is none), and the lanes' new low-water
        marks."""
        marks = self._marks.setdefault(queue, {})
        marked = self._marked.setdefault(queue, [])
        if len(marks) > _MAX_MARKS:
            # Drained keys' lanes are not told apart from busy ones: start again.
            marks.clear()
            marked.clear()
        live: dict[int, int] = {}
        for row in rows:
            if row["shard"] is None:
                continue
            shard = int(row["shard"])
            live[shard] = live.get(shard, 0) + int(row["live"])
            lane = (int(row["priority"]), shard)
            if lane not in marks and not _holds(marked, shard):
                bisect.insort(marked, shard)
            marks[lane] = int(row["mark"])
        return live

    async def _claim_piped(
        self,
        conn: DictConnection,
        queue: str,
        params: dict[str, Any],
        limits: _Limits,
        now: datetime,
        slot: int | None,
    ) -> tuple[list[dict[str, Any]], _Room]:
        """The claim under a per-key concurrency limit alone (no rate limiter) in one
        round trip when its first walk gives a whole window: the walk that locks the
        keys, their count (which leaves the room in the transaction) and the claim (which
        reads it) are sent together in the transaction's pipeline; each still starts
        after the one before it ended, so the count's snapshot sees every claim of the
        locked keys committed before. When the count finds the window not whole (keys at
        their limit among a full first walk) the claim takes nothing, and the window's
        further walks (:meth:`_room`) and the claim are made as for any limited claim,
        in the same transaction. The count and the claim read ring slot ``slot`` first
        (live_in_slot, claim_limited_in_slot; ``None``: the whole ring)."""
        per_key = limits.max_running_per_key
        assert per_key is not None
        limit = params["limit"]
        after = self._key_cursor.get(queue, _NO_KEY)
        walk = await self._sql.send_prepared(
            conn,
            "keyed_lanes_locked",
            queue=queue,
            keyed_base=_KEYED_BASE,
            key_after=Int8(after),
            walked=[],
            limit=limit,
        )
        count = await self._sql.send_prepared_in(
            conn,
            "live_of_walk",
            slot,
            queue=queue,
            per_key=Int8(per_key),
            limit=limit,
            **self._marks_of(queue, self._marks_ahead(queue, after, _MARKS_AHEAD * limit)),
        )
        claim = await self._sql.send_prepared_in(conn, "claim_limited", slot, **params)
        walked = [
            int(row["shard"]) for row in await fetch_decodable(walk) if row["shard"] is not None
        ]
        counted = await fetch_decodable(count)
        rows = await self._claimed_or_ring(conn, await fetch_decodable(claim), params)
        if _counted_whole(counted):
            live = self._note_marks(queue, counted)
        else:
            # A lane's rows were not all in the slot (the claim took nothing): count the
            # walked keys again over the whole ring, then complete the window as below.
            live = await self._live(conn, queue, walked, None)
        walks = _Walks(KeyWindow(limit), walked[-1] if walked else after)
        for shard in walked:
            walks.free[shard] = per_key - live.get(shard, 0)
        walks.window.add(walked, limit, lambda shard: walks.free[shard])
        whole = bool(counted[0]["whole"])
        room = await self._room(conn, queue, limit, limits, now, walks, slot)
        if whole:
            return rows, room
        # The claim took nothing: claim from the window the further walks completed.
        await self._sql.exec(conn, "set_room", room_shards=room.shards, room_free=room.free)
        rows = await self._sql.exec_prepared_in(conn, "claim_limited", slot, **params)
        return await self._claimed_or_ring(conn, rows, params), room

    async def _claimed_or_ring(
        self, conn: DictConnection, rows: list[dict[str, Any]], params: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """The rows of a limited claim, or, when it ran in a ring slot and a lane's rows
        were not all there (it then claimed nothing, claim_limited_in_slot), those of
        the claim over the whole ring in the same transaction."""
        if rows and rows[0]["elsewhere"]:
            return await self._sql.exec_prepared(conn, "claim_limited", **params)
        return rows

    def forget(self) -> None:
        """Forget what this process learnt of the lanes (after a reset of the engine's
        rows, whose lanes start again from position 0): the key cursors, lead lanes and
        low-water marks."""
        self._key_cursor.clear()
        self._lead.clear()
        self._marks.clear()
        self._marked.clear()

    async def _claim(
        self,
        queue: str,
        limit: int,
        now: datetime,
        deadline_at: datetime | None,
        params: dict[str, Any],
    ) -> list[Claim]:
        claims: list[Claim] = []
        # A claim statement leaves alone a lane that a cancel (or any writer retiring an
        # unclaimed row) marked after the statement's snapshot was taken, and says so
        # (`contested`); the rest of the batch is claimed again at once, under a newer
        # snapshot (ADR 0006, "Retiring unclaimed rows").
        for _ in range(_CONTESTED_TRIES):
            params["limit"] = limit - len(claims)
            if queue not in self._sorting:
                # The common case: one statement claims, moves the cursors and counts.
                rows = await self._claim_common(queue, params)
                self._note_lead(queue, rows, params["limit"])
                self._note_key_cursor(queue, rows, params)
                if not (rows and rows[0]["mixed"]):
                    got = self.remember(queue, rows, deadline_at)
                    claims.extend(got)
                    if not (rows and rows[0]["contested"]) or len(claims) >= limit:
                        return claims
                    continue
                self._sorting.add(queue)
            try:
                got, contested = await self._claim_sorted(queue, params, now, deadline_at)
            except _Contested:
                continue
            claims.extend(got)
            if not contested or len(claims) >= limit:
                return claims
        return claims

    def _note_key_cursor(
        self, queue: str, rows: Sequence[dict[str, Any]], params: dict[str, Any]
    ) -> None:
        """Move the queue's key cursor to the last key of the window a claim without a
        per-key limit visited (key_window_cursor), so its next claim (or this claim's
        next statement) visits the keys after it."""
        cursor = rows[0]["key_cursor"] if rows else None
        if cursor is not None:
            self._key_cursor[queue] = int(cursor)
            params["key_after"] = Int8(cursor)

    def _note_lead(self, queue: str, rows: Sequence[dict[str, Any]], limit: int) -> None:
        """Remember the lane a full batch came from alone (the queue's next claim reads
        it first), or forget the queue's lead lane."""
        lanes = {(r["priority"], r["shard"]) for r in rows if r["id"] is not None}
        taken = sum(1 for r in rows if r["id"] is not None)
        if len(lanes) == 1 and taken >= limit:
            self._lead[queue] = lanes.pop()
        else:
            self._lead.pop(queue, None)

    async def _claim_common(self, queue: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        """The one-statement claim: in the slot where the queue's last claimed rows were
        (claim_in_slot), then in the ring's current slot when that slot's windows reach
        elsewhere, and over the whole ring (claim) when neither holds them. Only the last
        reads the ring's partitioned parents, so only it waits for a prune's swap or
        plans again after one."""
        # Left in place while the claim runs: claims of the queue that run beside it
        # (claims ahead, several claim loops) claim in the same slot, not over the whole
        # ring. A statement that fails (a slot the ring no longer has, after a reinstall
        # with fewer slots) is forgotten, so it is not tried again.
        slot = self._slots.get(queue)
        tried: set[int] = set()
        async with translated_errors():
            while slot is not None and slot not in tried:
                tried.add(slot)
                try:
                    async with self._connections.kept_conn("claim", self._has(slot)) as conn:
                        rows = await self._claim_in_slot(conn, queue, slot, params)
                        self._planned_on(conn).add(slot)
                except Exception:
                    if self._slots.get(queue) == slot:
                        del self._slots[queue]
                    raise
                if rows and rows[0]["current_slot"] == slot:
                    self._warm_next(slot, rows[0]["next_slot"])
                if not (rows and rows[0]["elsewhere"]):
                    if not self._note_slot(queue, rows):
                        self._slots[queue] = slot
                    return rows
                slot = rows[0]["current_slot"]
            async with self._connections.kept_conn("claim", self._has(_RING)) as conn:
                rows = await self._sql.exec(conn, "claim", **params)
                self._planned_on(conn).add(_RING)
        if not self._note_slot(queue, rows) and slot is not None:
            # nothing taken: the current slot is where new rows go
            self._slots[queue] = slot
        found = self._slots.get(queue)
        if found is not None and not self._planned_anywhere(found) and self._warm_pending is None:
            # The queue's next claim runs claim_in_slot there: planned now, off its path
            # (a worker's first claim of a queue reads the whole ring, and the jobs right
            # after it waited 3-7 ms for that slot's first plan).
            self._warm_pending = found
        return rows

    async def _claim_in_slot(
        self, conn: DictConnection, queue: str, slot: int, params: dict[str, Any]
    ) -> list[dict[str, Any]]:
        """The claim of ring ``slot``: claim_lone_in_slot while the queue's claims lock
        lanes it takes (one keyless lane in lane order, or keyless lanes whose rows fit in
        the batch), else (and at once when that reports `several`) claim_in_slot, until
        one of its runs locks such lanes again (`lone`)."""
        if queue not in self._several:
            statement = self._sql.for_slot("claim_lone_in_slot", slot)
            rows = await self._sql.run_generic(conn, statement, params)
            if not (rows and rows[0]["several"]):
                return rows
            self._several.add(queue)
            if rows[0]["id"] is not None:
                # It claims nothing when it says `several`; were it ever to, its claims
                # are the caller's (they are written), never dropped.
                return rows
        statement = self._sql.for_slot("claim_in_slot", slot)
        rows = await self._sql.run_generic(conn, statement, params)
        if rows and rows[0]["lone"]:
            self._several.discard(queue)
        return rows

    def _planned_on(self, conn: DictConnection) -> set[int]:
        return self._planned.setdefault(conn, set())

    def _has(self, slot: int) -> Callable[[DictConnection], bool]:
        """Whether a kept claim connection has ``slot``'s claim planned."""
        return lambda conn: slot in self._planned.get(conn, ())

    def _planned_anywhere(self, slot: int) -> bool:
        return any(slot in planned for planned in self._planned.values())

    def _warm_next(self, current: int, following: int) -> None:
        """Once claims run in the ring's new current slot, plan the claim of the slot it
        enters next, in the background, on the other kept claim connection.

        Prune swaps a slot's partitions a rotation before the ring enters it
        (``QueueRing``), which makes a connection plan that slot's claim again: 3-7 ms
        of the server's CPU. Planned here, it is no longer paid by the first job claimed
        after the next rotation. Not sooner: until the claims leave the previous slot,
        each kept claim connection serves one of the two slots."""
        if current != self._ring_current:
            self._ring_current = current
            self._warm_pending = None if following == current else following

    def _start_warm_up(self, params: dict[str, Any]) -> None:
        """Start the warm-up _warm_next asked for, once the claim (whose ``params`` they
        were) has given its connection back."""
        if self._warming is not None and not self._warming.done():
            # One at a time: the one running takes it up when it ends.
            return
        slot, self._warm_pending = self._warm_pending, None
        if slot is None:
            return
        # The claim's own values, so every parameter is sent with the same type (the
        # driver picks an integer's type by its size, and a prepared statement is kept
        # per parameter types): the plan made is the one the claim uses. No queue has an
        # empty name, so the statement plans, finds no lane and claims nothing.
        warm = {**params, "queue": ""}
        self._warming = asyncio.get_running_loop().create_task(self._warm_slots(slot, warm))

    async def _warm_slots(self, slot: int, params: dict[str, Any]) -> None:
        """Warm ``slot``, then any slot asked for meanwhile."""
        next_slot: int | None = slot
        while next_slot is not None:
            await self._warm_slot(next_slot, params)
            next_slot, self._warm_pending = self._warm_pending, None

    async def _warm_slot(self, slot: int, params: dict[str, Any]) -> None:
        statements = [
            self._sql.for_slot(name, slot) for name in ("claim_lone_in_slot", "claim_in_slot")
        ]

        async def warm(conn: DictConnection) -> None:
            for statement in statements:
                await self._sql.run_generic(conn, statement, params)
            # Planned here, where the claims of the slot go from now on.
            for planned in self._planned.values():
                planned.discard(slot)
            self._planned_on(conn).add(slot)

        # Not on the connection where the current slot's claims run: they go on
        # meanwhile.
        current = self._ring_current
        avoid = None if current is None or current == slot else self._has(current)
        try:
            async with translated_errors():
                await self._connections.warm_kept("claim", warm, avoid)
        except Exception:
            # Best effort: the claim plans the slot itself when it gets there.
            log.debug("planning the claim of ring slot %d ahead failed", slot, exc_info=True)

    async def drain(self) -> None:
        """Let a warm-up in flight finish (engine shutdown)."""
        task, self._warming = self._warming, None
        await settled(task)

    def _note_slot(self, queue: str, rows: Sequence[dict[str, Any]]) -> bool:
        """Remember the slot of the last row a claim took (rows come best first, so the
        last is the one appended latest); whether it took any."""
        taken = [row["slot"] for row in rows if row["id"] is not None]
        if taken:
            self._slots[queue] = taken[-1]
        return bool(taken)

    async def _claim_sorted(
        self,
        queue: str,
        params: dict[str, Any],
        now: datetime,
        deadline_at: datetime | None,
        *,
        limits: _Limits | None = None,
        slot: int | None = None,
    ) -> tuple[list[Claim], bool]:
        """claim_sorted in a transaction with the cursor moves, unique keys and counters;
        raises _Contested (nothing written) when a row it took from a sorted window was
        claimed or tombstoned by a transaction that committed while it took its locks.
        Returns the claims and whether a lane was left alone because a retiring writer
        marked it after the statement's snapshot. ``slot``: the ring slot a per-key
        limited claim's count and claim read first."""
        batch = ClaimBatch()
        # In pipeline mode: BEGIN travels with the first statement and what follows the
        # last read with COMMIT; a claim under a per-key limit alone reads once when its
        # first walk gives a whole window (_claim_piped), so it is two round trips.
        async with translated_errors(), self._connections.tx(pipeline=True) as conn:
            if limits is None:
                rows = await self._sql.exec(conn, "claim_sorted", **params)
                self._note_key_cursor(queue, rows, params)
            elif not limits.keyed:
                held = await lock_limiters(
                    conn,
                    queue,
                    queue_limit=limits.rate,
                    per_key_limit=None,
                    key_names=(),
                    wanted=params["limit"],
                    now=now,
                )
                allowed = held.allowed.limit
                batch.next_admission = held.next_admission
                if allowed <= 0:
                    batch.rate_limited = params["limit"]
                    return batch, False
                rows = await self._sql.exec(conn, "claim_sorted", **{**params, "limit": allowed})
                if len([r for r in rows if r["id"] is not None]) == allowed:
                    batch.rate_limited = params["limit"] - allowed
            else:
                # Every statement of this claim runs under its generic plan, made once
                # per connection: each planned anew cost about as much as its run.
                await self._sql.exec(conn, "generic_plan_here")
                if limits.rate is None and limits.rate_per_key is None:
                    rows, room = await self._claim_piped(conn, queue, params, limits, now, slot)
                    held = room.held
                    batch.next_admission = held.next_admission
                    batch.concurrency_limited = room.concurrency_limited
                else:
                    room = await self._room(conn, queue, params["limit"], limits, now, slot=slot)
                    held = room.held
                    allowed = held.allowed.limit
                    batch.next_admission = held.next_admission
                    batch.concurrency_limited = room.concurrency_limited
                    batch.rate_limited = room.rate_limited
                    if allowed <= 0:
                        batch.rate_limited += params["limit"]
                        return batch, False
                    await self._sql.exec(
                        conn, "set_room", room_shards=room.shards, room_free=room.free
                    )
                    rated = {**params, "limit": allowed}
                    rows = await self._claimed_or_ring(
                        conn,
                        await self._sql.exec_prepared_in(conn, "claim_limited", slot, **rated),
                        rated,
                    )
                    if len([r for r in rows if r["id"] is not None]) == allowed:
                        batch.rate_limited += params["limit"] - allowed
            if rows and rows[0]["mixed"]:
                self._sorting.add(queue)
            else:
                self._sorting.discard(queue)
            contested = bool(rows and rows[0]["contested"])
            taken = [row for row in rows if row["id"] is not None]
            if not taken:
                return batch, contested
            # The queue's next common claim starts in the slot these rows came from, not
            # over the whole ring (whose plan every prune's swap makes stale).
            self._note_slot(queue, taken)
            # The claim moved the cursors of ordered lanes itself; sorted windows are
            # moved over their claimed prefix here.
            sorted_lanes = [r for r in taken if r["disordered"]]
            if sorted_lanes and await self._sql.exec(
                conn,
                "contested_claims",
                slots=[r["slot"] for r in sorted_lanes],
                facts=[r["ready_fact"] for r in sorted_lanes],
                claims=[r["claim_id"] for r in sorted_lanes],
            ):
                raise _Contested()
            if sorted_lanes:
                await self._sql.exec(
                    conn,
                    "advance_cursors",
                    queues=[queue] * len(sorted_lanes),
                    priorities=[r["priority"] for r in sorted_lanes],
                    shards=[r["shard"] for r in sorted_lanes],
                )
            claims = self.remember(queue, taken, deadline_at)
            changes = [
                (attrs.evolve(c.job, state=JobState.Available), c.job)
                for c in claims
                if c.job.unique_key is not None
            ]
            writes = Writes(now)
            # Every claimed job moved from available to running in this queue.
            writes.counts[(queue, JobState.Available.sql_name)] -= len(taken)
            writes.counts[(queue, JobState.Running.sql_name)] += len(taken)
            if changes:
                await self._facts.unique(conn, changes)
            await self._facts.flush(conn, writes)
            if limits is not None:
                await held.store(
                    conn,
                    taken=len(taken),
                    taken_per_key=dict(
                        Counter(
                            shard_limiter(r["shard"])
                            for r in taken
                            if r["shard"] >= KEYED_SHARD_BASE
                        )
                    ),
                )
                batch.next_admission = held.next_admission
        batch.extend(claims)
        return batch, contested

    async def warm_up(self, queues: Sequence[str]) -> None:
        """:class:`~awa.ports.storage.WorkerWarmUp`: open the connections kept for the
        claim (both: one claims while the other plans the next ring slot's claim) and
        for completion by receipt, and plan both statements on them (the claim is only
        explained, the completion runs on nothing). A new backend otherwise loads the
        catalog of every ring partition on its first call, tens of ms on the first jobs'
        path.

        The three connections open and plan side by side: each backend loads the catalog
        on its own, so one after another they held the worker's start for the sum of
        the three (330-370 ms on a busy host), side by side for the longest."""
        if not queues:
            return
        now = self._clock.now()
        params = claim_parameters(queues[0], 1, now)

        async def plan_claim() -> None:
            # All run at once, so none finds another's connection idle: each opens one.
            async with self._connections.kept_conn("claim") as conn:
                await run(conn, self._sql["explain_claim"], params)

        async def plan_completion() -> None:
            async with self._connections.kept_conn("complete") as conn:
                await self._sql.exec_generic(
                    conn,
                    "complete_receipts_counted",
                    now=now,
                    minute=minute_of(now),
                    # the parameter types of a completion's (finalize.py), so the
                    # statement prepared here is the one completions run
                    ids=Int8s(),
                    leases=Int8s(),
                    slots=Int8s(),
                    claims=Int8s(),
                    queues=[],
                    release=False,
                )

        async with translated_errors():
            outcomes = await asyncio.gather(
                *(plan_claim() for _ in range(KEPT_CONNECTIONS)),
                plan_completion(),
                return_exceptions=True,
            )
            for outcome in outcomes:
                if isinstance(outcome, BaseException):
                    raise outcome

    def remember(
        self, queue: str, rows: Sequence[dict[str, Any]], deadline_at: datetime | None
    ) -> list[Claim]:
        """Claims from claim rows; receipts of jobs without a unique key are remembered
        so their completion is closed by key (complete_receipts_counted)."""
        receipts = self._receipts.make_room(len(rows))
        claims = []
        for row in rows:
            if row["id"] is None:
                continue
            job = _claimed_job(row)
            if job.unique_key is None:
                receipts[(job.id, job.run_lease)] = (row["slot"], row["claim_id"], queue)
            claims.append(
                Claim(job=job, lease=job.lease, deadline_at=deadline_at, shard=row["shard"])
            )
        return claims
