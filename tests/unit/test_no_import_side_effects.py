"""Importing Awa changes nothing outside it (the queue-storage engine converts its own
statements' placeholders, tests/unit/test_queue_storage_statement_params.py)."""

from __future__ import annotations

import json
import subprocess
import sys

# Prints psycopg's module settings and registries, imports every module of awa, prints
# them again.
_PROBE = """
import importlib, importlib.util, json, pkgutil
import psycopg, psycopg._queries as q

def fingerprint():
    settings = {k: v for k, v in vars(q).items() if isinstance(v, (int, str, bool))}
    return {
        "settings": settings,
        "types": sorted(t.name for t in psycopg.adapters.types),
        "dumpers": sorted(map(repr, psycopg.adapters._dumpers.items())),
        "loaders": sorted(map(repr, psycopg.adapters._loaders)),
    }

def django_tasks_available():
    try:
        return importlib.util.find_spec("django.tasks") is not None
    except ImportError:
        return False

before = fingerprint()
import awa
# awa.contrib.django's modules import Django 6 (Python 3.12+), absent here; the package
# itself and its Django-free rules module still are imported.
skip_django = not django_tasks_available()
for info in pkgutil.walk_packages(awa.__path__, "awa.", onerror=lambda name: None):
    if "_sync_codegen" in info.name:
        continue
    if skip_django and info.name.startswith("awa.contrib.django.") and not info.name.endswith(
        "._shape"
    ):
        continue
    importlib.import_module(info.name)
print(json.dumps([before, fingerprint()]))
"""


def test_importing_awa_leaves_psycopg_as_it_was() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], check=True, capture_output=True, text=True, timeout=120
    ).stdout
    before, after = json.loads(out.strip().splitlines()[-1])
    assert after == before
