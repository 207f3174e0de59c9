"""Importing Awa changes nothing outside it, and the queue-storage engine keeps the
placeholder conversion of its long statements to its own cursors."""

from __future__ import annotations

import json
import subprocess
import sys

from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH
from psycopg.adapt import Transformer

from awa.adapters.postgres_queue_storage import statements

# Prints psycopg's module settings and registries, imports every module of awa, prints
# them again.
_PROBE = """
import importlib, json, pkgutil
import psycopg, psycopg._queries as q

def fingerprint():
    settings = {k: v for k, v in vars(q).items() if isinstance(v, (int, str, bool))}
    return {
        "settings": settings,
        "types": sorted(t.name for t in psycopg.adapters.types),
        "dumpers": sorted(map(repr, psycopg.adapters._dumpers.items())),
        "loaders": sorted(map(repr, psycopg.adapters._loaders)),
    }

before = fingerprint()
import awa
for info in pkgutil.walk_packages(awa.__path__, "awa."):
    if "_sync_codegen" not in info.name:
        importlib.import_module(info.name)
print(json.dumps([before, fingerprint()]))
"""


def test_importing_awa_leaves_psycopg_as_it_was() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], check=True, capture_output=True, text=True, timeout=120
    ).stdout
    before, after = json.loads(out.strip().splitlines()[-1])
    assert after == before


def test_long_statements_are_converted_once() -> None:
    statement = b"SELECT %(a)s::int AS a -- " + b"x" * (MAX_CACHED_STATEMENT_LENGTH + 1)
    first = statements._StatementQuery(Transformer())
    first.convert(statement, {"a": 1})
    hits = statements._convert.cache_info().hits
    again = statements._StatementQuery(Transformer())
    again.convert(statement, {"a": 2})
    assert statements._convert.cache_info().hits == hits + 1
    assert again.query.startswith(b"SELECT $1::int AS a")
    assert again.params is not None and len(again.params) == 1
