"""Lane allocation for producers: which lane a job goes to, and its position there."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime

from awa.adapters._pg.pool import DictConnection
from awa.adapters.postgres_queue_storage.statements import KEYLESS_LANES, Statements
from awa.domain.flow_control import concurrency_key_of, keyed_shard
from awa.domain.job import JobRecord
from awa.domain.partitioning import shard_for_key

#: A lane: ``(queue, priority, shard)``, the shard ``None`` for "any free lane of
#: (queue, priority)" (jobs without an ordering key).
Lane = tuple[str, int, int | None]


class LaneAllocator:
    """The lanes of this process's producers: a rotor over each queue's lanes for jobs
    without an ordering key, and the queues' ``enqueue_shards`` for jobs with one."""

    def __init__(self, statements: Statements) -> None:
        self._sql = statements
        self._rotor: dict[str, int] = {}
        self._shards: dict[str, int] = {}

    def forget_shards(self) -> None:
        """Read every queue's ``enqueue_shards`` again (after a reset)."""
        self._shards.clear()

    def lane_of(
        self,
        queue: str,
        priority: int,
        ordering_key: bytes | None,
        concurrency_key: str | None = None,
    ) -> Lane:
        """The lane of a job (its queue's shards loaded first, when it has an ordering
        key); a job with a concurrency key goes to its key's own lane (ADR 0029)."""
        if concurrency_key is not None:
            return (queue, priority, keyed_shard(concurrency_key))
        if ordering_key is None:
            return (queue, priority, None)
        return (queue, priority, shard_for_key(ordering_key, self.shard_count(queue)))

    def job_lane(self, job: JobRecord, ordering_key: bytes | None) -> Lane:
        """The lane of an available snapshot."""
        return self.lane_of(job.queue, job.priority, ordering_key, concurrency_key_of(job.metadata))

    def shard_count(self, queue: str) -> int:
        return self._shards.get(queue, 1)

    async def load_shards(self, conn: DictConnection, queues: Iterable[str]) -> None:
        """Read the queues' ``enqueue_shards`` (an ordering key's lane depends on it)."""
        wanted = sorted(set(queues))
        rows = await self._sql.exec(conn, "enqueue_shards", queues=wanted)
        found = {row["queue"]: int(row["enqueue_shards"]) for row in rows}
        for queue in wanted:
            self._shards[queue] = found.get(queue, 1)

    def hint(self, queue: str) -> int:
        """The lane a job without an ordering key tries first: the process's rotor over
        as many of the queue's negative lanes as it has enqueue shards (another free lane
        is taken when that one is held)."""
        shards = min(self.shard_count(queue), KEYLESS_LANES)
        turn = self._rotor.get(queue, 0)
        self._rotor[queue] = turn + 1
        return -1 - turn % shards

    async def lock_named(
        self, conn: DictConnection, items: Sequence[tuple[JobRecord, bytes | None]]
    ) -> None:
        """Lock the ordering-key lanes these available snapshots will be appended to,
        before their old rows are retired (lock order: lanes, then claim heads; ADR
        0006). Jobs without a key take a free lane later, which is never waited for."""
        keyed = [
            (job, key)
            for job, key in items
            if key is not None or concurrency_key_of(job.metadata) is not None
        ]
        if not keyed:
            return
        await self.load_shards(conn, {job.queue for job, key in keyed if key is not None})
        lanes = sorted({self.job_lane(job, key) for job, key in keyed})
        await self._sql.exec(
            conn,
            "lock_lanes",
            queues=[lane[0] for lane in lanes],
            priorities=[lane[1] for lane in lanes],
            shards=[lane[2] for lane in lanes],
        )

    async def reserve(
        self,
        conn: DictConnection,
        ready: Sequence[tuple[JobRecord, bytes | None]],
        *,
        stamp: datetime | None = None,
    ) -> list[tuple[int, int, datetime]]:
        """Reserve each available job's lane position (lock order: ``lanes`` rows, then
        ``claim_heads`` rows). A job with an ordering key goes to its key's shard; the jobs
        of one ``(queue, priority)`` without a key go together to whichever lane of it no
        other open transaction holds. ``stamp``: the jobs are new, and those whose run_at
        is ``stamp`` (the producer's clock) may be stamped later under the lane's lock
        (``lane_stamp``). Returns ``(shard, lane_seq, run_at)`` per job, in input order."""
        keyed = {job.queue for job, key in ready if key is not None}
        if keyed:
            await self.load_shards(conn, keyed)
        lanes = [self.job_lane(job, key) for job, key in ready]
        wanted = Counter(lanes)
        order = sorted(wanted, key=lambda lane: (lane[0], lane[1], lane[2] is None, lane[2]))
        # Each lane's order key (run_at, job id): first and largest of the batch, and
        # whether the batch itself is in that order, so the lane row can record it.
        keys: dict[Lane, list[tuple[datetime, int]]] = {}
        for (job, _), lane in zip(ready, lanes, strict=True):
            keys.setdefault(lane, []).append((job.run_at, job.id))
        fresh = {
            lane: stamp is not None and all(at == stamp for at, _ in keys[lane]) for lane in order
        }
        ends = await self._sql.exec(
            conn,
            "reserve_lanes",
            queues=[lane[0] for lane in order],
            priorities=[lane[1] for lane in order],
            shards=[lane[2] for lane in order],
            hints=[self.hint(lane[0]) for lane in order],
            counts=[wanted[lane] for lane in order],
            first_runs=[keys[lane][0][0] for lane in order],
            first_ids=[keys[lane][0][1] for lane in order],
            last_runs=[max(keys[lane])[0] for lane in order],
            last_ids=[max(keys[lane])[1] for lane in order],
            sorted=[keys[lane] == sorted(keys[lane]) for lane in order],
            fresh=[fresh[lane] for lane in order],
        )
        nxt: dict[Lane, list[int]] = {}
        stamps: dict[Lane, datetime] = {}
        for r in ends:
            lane = (r["queue"], r["priority"], r["asked"])
            nxt[lane] = [r["shard"], r["next_seq"] - wanted[lane]]
            if fresh[lane]:
                stamps[lane] = r["stamp"]
        placed = []
        for (job, _), lane in zip(ready, lanes, strict=True):
            shard_seq = nxt[lane]
            placed.append((shard_seq[0], shard_seq[1], stamps.get(lane, job.run_at)))
            shard_seq[1] += 1
        return placed
