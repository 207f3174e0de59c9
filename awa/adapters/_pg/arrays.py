"""Integer arrays as statement parameters, rendered in one pass.

psycopg renders a ``list`` parameter element by element in Python, testing each for
quotes with a regular expression: for the arrays of job ids, leases, slots and claim ids
a worker's completions send, that was about five searches per completed job. An
:class:`Int8s` (a ``list`` of ``int``) is rendered by one ``join`` as an ``int8[]`` value;
every connection :func:`awa.adapters._pg.pool.configure` sets up knows it, and one that
does not (a caller's own connection) renders it as the list it is.
"""

from __future__ import annotations

from psycopg.adapt import Buffer, Dumper
from psycopg.postgres import types

#: ``int8[]``.
INT8_ARRAY_OID = types["int8"].array_oid


class Int8s(list[int]):
    """An ``int8[]`` parameter: integers only (no ``None``, no ``bool``)."""


class Int8sDumper(Dumper):
    oid = INT8_ARRAY_OID

    def dump(self, obj: Int8s) -> Buffer:
        return ("{" + ",".join(map(str, obj)) + "}").encode()
