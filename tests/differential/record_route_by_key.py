"""Record awa-pg 0.6.9's ``PartitionedQueue.route_by_key`` over many keys, as test data.

Run under an interpreter that has awa-pg 0.6.9 installed (not this package)::

    python -P tests/differential/record_route_by_key.py > tests/fixtures/awa_pg_route_by_key.json

The unit tests compare this package's routing with the recorded physical queue indexes.
It uses nothing but the standard library and the ``awa`` it imports.
"""

from __future__ import annotations

import json
import random
from importlib import metadata

PARTITIONS = (2, 3, 4, 5, 7, 8, 16, 31, 64, 1000, 32767)


def keys() -> list[bytes]:
    rng = random.Random(20260101)
    found: list[bytes] = [b"", b"a", b"ab", b"user-42", b"order:1", "é".encode(), b"\x00\xff"]
    found += [f"customer-{i}".encode() for i in range(200)]
    found += [f"☃ snow 雪 {i}".encode() for i in range(20)]
    found += [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))) for _ in range(150)]
    return found


def main() -> None:
    import awa

    recorded = keys()
    index: dict[str, list[int]] = {}
    for count in PARTITIONS:
        queue = awa.PartitionedQueue("orders", count)
        names = queue.physical_queues
        index[str(count)] = [names.index(queue.route_by_key(k)["queue"]) for k in recorded]
    # A str key is passed as it is, to record how the original encodes it.
    queue = awa.PartitionedQueue("orders", 16)
    str_keys = [f"ключ-{i}" for i in range(40)]
    str_index = [queue.physical_queues.index(queue.route_by_key(k)["queue"]) for k in str_keys]
    recorded_with = f"awa-pg {metadata.version('awa-pg')}"
    print(
        json.dumps(
            {
                "recorded_with": recorded_with,
                "keys_hex": [k.hex() for k in recorded],
                "physical_index": index,
                "str_keys": str_keys,
                "str_physical_index_16": str_index,
            }
        )
    )


if __name__ == "__main__":
    main()
