"""The receipts an engine took itself, so a completion closes them without a lookup."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from awa.domain.job import RunLease

# Receipts remembered for completion by key; beyond this the oldest half is forgotten.
RECEIPT_CACHE_LIMIT = 200_000

#: ``(job_id, run_lease)``.
Key = tuple[int, int]
#: ``(slot, claim_id, queue)``: where the attempt's receipt lives.
Receipt = tuple[int, int, str]


class ReceiptCache:
    """Receipts of attempts without a unique key that this engine claimed:
    ``(job_id, run_lease) -> (slot, claim_id, queue)``. A completion of one of them is
    closed by its receipt key without looking the job up (``complete_receipts_counted``).
    An entry left behind by an attempt finalised elsewhere is harmless: the closure key
    and the receipt check decide, the entry only saves a lookup."""

    def __init__(self, limit: int = RECEIPT_CACHE_LIMIT) -> None:
        self.limit = limit
        self.entries: dict[Key, Receipt] = {}

    def make_room(self, count: int) -> dict[Key, Receipt]:
        """Room for ``count`` more receipts (the oldest half goes when it is full: those
        attempts finished, or were rescued, long ago); returns the entries to add to."""
        entries = self.entries
        if len(entries) + count > self.limit:
            for key in list(itertools.islice(entries, len(entries) // 2)):
                del entries[key]
        return entries

    def take(self, leases: Sequence[RunLease]) -> dict[Key, Receipt]:
        """Remove and return the receipts of ``leases`` this engine holds."""
        entries = self.entries
        known: dict[Key, Receipt] = {}
        for lease in leases:
            key = (lease.job_id, lease.lease)
            found = entries.pop(key, None)
            if found is not None:
                known[key] = found
        return known

    def forget(self, lease: RunLease) -> None:
        """The attempt leaves the short path: its completion (if any) is looked up."""
        self.entries.pop((lease.job_id, lease.lease), None)
