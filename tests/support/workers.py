"""How many pytest-xdist workers ``scripts/test`` runs (``pytest -n auto``).

Two on a machine of two cores or more (the tests mostly wait on Postgres, notifications
and handlers, and a third worker was not measured to pay: compare with
``python -m benchmarks.suite_workers``), none (every test in the pytest process) on one
core. Each worker holds up to :data:`CONNECTIONS_PER_WORKER` connections at its peak, so
the count is lowered until the run fits in the server's ``max_connections`` less
:data:`RESERVED_CONNECTIONS`; below two workers the run goes in-process.
"""

from __future__ import annotations

import os

import psycopg

from tests.support.pg import LOCAL_URL, env_url, forced_provider, local_server_answers

#: Workers on a machine of two cores or more.
WORKERS = 2
#: A worker's peak connections to the server, with a margin (29 seen on a busy host in a
#: whole run at ``-n 2``, counted per worker process and its subprocesses).
CONNECTIONS_PER_WORKER = 40
#: Left to the server's superuser slots and to other users of a shared server.
RESERVED_CONNECTIONS = 10


def choose_workers(cores: int, max_connections: int | None) -> int:
    """The worker count for ``cores`` CPUs and a server allowing ``max_connections``
    (``None``: each worker starts its own server, so no shared limit applies)."""
    workers = WORKERS if cores >= 2 else 0
    if max_connections is not None:
        fits = (max_connections - RESERVED_CONNECTIONS) // CONNECTIONS_PER_WORKER
        workers = min(workers, fits)
    return workers if workers >= 2 else 0


def shared_server_url() -> str | None:
    """The server every worker will share, as :func:`~tests.support.pg.provision` finds
    it, without starting one; ``None`` when each worker starts its own (embedded, docker)."""
    forced = forced_provider()
    if forced == "env" or (forced is None and env_url() is not None):
        return env_url()
    if forced == "local" or (forced is None and local_server_answers()):
        return LOCAL_URL
    return None


def server_max_connections(url: str | None) -> int | None:
    """``max_connections`` of the server at ``url``; ``None`` without one or if it does
    not answer (the workers' own provisioning then says why)."""
    if url is None:
        return None
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
            row = conn.execute("SHOW max_connections").fetchone()
    except psycopg.Error:
        return None
    return int(row[0]) if row is not None else None


def auto_workers() -> tuple[int, int | None]:
    """(workers, the shared server's ``max_connections`` or ``None``) for this machine."""
    limit = server_max_connections(shared_server_url())
    return choose_workers(os.cpu_count() or 1, limit), limit
