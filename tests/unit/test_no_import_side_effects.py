"""Importing Awa changes nothing outside it (the queue-storage engine converts its own
statements' placeholders, tests/unit/test_queue_storage_statement_params.py)."""

from __future__ import annotations

import json
import subprocess
import sys

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
