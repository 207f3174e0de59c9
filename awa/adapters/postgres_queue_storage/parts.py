"""The parts of one queue-storage engine and how they are wired (ADR 0006, "Shape of the
engine").

Each part is built here with exactly the parts it may call, passed to its constructor;
no part reaches another through a shared object. Infrastructure parts come first, then
the operations by capability; the engine (:mod:`.engine`) only delegates to them.
"""

from __future__ import annotations

import attrs
from psycopg_pool import AsyncConnectionPool

from awa.adapters._pg.pool import DictConnection
from awa.adapters.postgres_queue_storage.admin import AdminReads
from awa.adapters.postgres_queue_storage.admin_changes import AdminChanges
from awa.adapters.postgres_queue_storage.batch import BatchTargets
from awa.adapters.postgres_queue_storage.callbacks import Callbacks
from awa.adapters.postgres_queue_storage.carry import Carry
from awa.adapters.postgres_queue_storage.claim import Claims
from awa.adapters.postgres_queue_storage.connections import Connections
from awa.adapters.postgres_queue_storage.copy import CopyEnqueue
from awa.adapters.postgres_queue_storage.dlq import DeadLetters
from awa.adapters.postgres_queue_storage.enqueue import Enqueue
from awa.adapters.postgres_queue_storage.facts import FactWriter
from awa.adapters.postgres_queue_storage.finalize import Completion
from awa.adapters.postgres_queue_storage.group_commit import GroupCommit
from awa.adapters.postgres_queue_storage.lanes import LaneAllocator
from awa.adapters.postgres_queue_storage.lease_ring import LeaseRing
from awa.adapters.postgres_queue_storage.long_tx import LongTransactions
from awa.adapters.postgres_queue_storage.outcomes import Outcomes
from awa.adapters.postgres_queue_storage.receipts import ReceiptCache
from awa.adapters.postgres_queue_storage.ring import QueueRing
from awa.adapters.postgres_queue_storage.statements import Statements
from awa.adapters.postgres_queue_storage.swap import PartitionSwap
from awa.adapters.postgres_queue_storage.sweeps import Sweeps
from awa.adapters.postgres_queue_storage.wakes import WakeCoalescer
from awa.domain.kind_policies import KindPolicies
from awa.domain.policies import Backoff
from awa.ports.clock import Clock


@attrs.frozen
class Parts:
    """Every part of one engine."""

    # infrastructure
    statements: Statements
    connections: Connections
    receipts: ReceiptCache
    group: GroupCommit
    wakes: WakeCoalescer
    lanes: LaneAllocator
    facts: FactWriter
    swap: PartitionSwap
    carry: Carry
    long_transactions: LongTransactions
    # operations
    enqueue: Enqueue
    copy: CopyEnqueue
    claims: Claims
    completion: Completion
    outcomes: Outcomes
    callbacks: Callbacks
    sweeps: Sweeps
    queue_ring: QueueRing
    lease_ring: LeaseRing
    admin: AdminReads
    changes: AdminChanges
    dlq: DeadLetters
    batch: BatchTargets


def build_parts(
    owner: object,
    pool: AsyncConnectionPool[DictConnection],
    *,
    clock: Clock,
    backoff: Backoff,
    policies: KindPolicies,
    schema: str,
) -> Parts:
    """The parts of an engine on ``pool`` for ``schema``; ``owner`` is the engine callers
    see (the owner of its units of work)."""
    statements = Statements(schema)
    # A kept connection's hot statement runs under its generic plan with no setting sent
    # along (Statements.run_generic): one message per call.
    connections = Connections(pool, prepare_kept=statements.plan_generically)
    receipts = ReceiptCache()
    lanes = LaneAllocator(statements)
    facts = FactWriter(statements, lanes)
    swap = PartitionSwap(connections, statements)
    carry = Carry(statements)
    long_transactions = LongTransactions(connections, statements, clock)
    group = GroupCommit(connections, clock)
    wakes = WakeCoalescer(connections, statements)
    changes = AdminChanges(
        connections=connections, statements=statements, facts=facts, lanes=lanes, clock=clock
    )
    outcomes = Outcomes(
        connections=connections,
        statements=statements,
        facts=facts,
        receipts=receipts,
        changes=changes,
        clock=clock,
        backoff=backoff,
        policies=policies,
    )
    enqueue = Enqueue(
        owner=owner,
        connections=connections,
        statements=statements,
        lanes=lanes,
        facts=facts,
        group=group,
        wakes=wakes,
        clock=clock,
    )
    return Parts(
        statements=statements,
        connections=connections,
        receipts=receipts,
        group=group,
        wakes=wakes,
        lanes=lanes,
        facts=facts,
        swap=swap,
        carry=carry,
        long_transactions=long_transactions,
        enqueue=enqueue,
        copy=CopyEnqueue(
            owner=owner,
            connections=connections,
            statements=statements,
            lanes=lanes,
            facts=facts,
            clock=clock,
            general=enqueue.insert,
        ),
        claims=Claims(
            connections=connections,
            statements=statements,
            facts=facts,
            receipts=receipts,
            clock=clock,
        ),
        completion=Completion(
            connections=connections,
            statements=statements,
            facts=facts,
            receipts=receipts,
            outcomes=outcomes,
            clock=clock,
        ),
        outcomes=outcomes,
        callbacks=Callbacks(
            connections=connections, statements=statements, facts=facts, outcomes=outcomes
        ),
        sweeps=Sweeps(
            connections=connections,
            statements=statements,
            facts=facts,
            outcomes=outcomes,
            clock=clock,
        ),
        queue_ring=QueueRing(
            connections=connections,
            statements=statements,
            facts=facts,
            swap=swap,
            carry=carry,
            long_transactions=long_transactions,
            clock=clock,
        ),
        lease_ring=LeaseRing(
            connections=connections, statements=statements, swap=swap, carry=carry, clock=clock
        ),
        admin=AdminReads(connections=connections, statements=statements, facts=facts, clock=clock),
        changes=changes,
        dlq=DeadLetters(
            connections=connections,
            statements=statements,
            facts=facts,
            changes=changes,
            clock=clock,
        ),
        batch=BatchTargets(
            connections=connections,
            statements=statements,
            facts=facts,
            changes=changes,
            clock=clock,
        ),
    )
