"""A one-second schedule watched across a killed or stopped maintenance leader: every
slot is enqueued at most once, and firing resumes under the new leader.

Run the chaos tests alone with ``scripts/test-chaos`` (the test command leaves them out).
"""

from __future__ import annotations

import itertools
import os
import signal
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.chaos.test_leader_failover import _leader_backend
from tests.fixtures.cron_app import SCHEDULE
from tests.fixtures.processes import query, spawn_worker, wait_for, wait_registered

pytestmark = [pytest.mark.postgres, pytest.mark.chaos]

ELECTION_MS = 300
LEASE_MS = 1000
OPTIONS = {"leader_election_interval_ms": ELECTION_MS, "leader_lease_ttl_ms": LEASE_MS}
MODULE = "tests.fixtures.cron_app"


def _fire_times(url: str) -> list[datetime]:
    rows = query(
        url,
        "SELECT metadata->>'cron_fire_time' AS fire FROM awa.jobs"
        " WHERE metadata->>'cron_name' = %s",
        SCHEDULE,
    )
    return [datetime.fromisoformat(row["fire"]) for row in rows]


@pytest.mark.parametrize("fault", ["kill", "stop"])
def test_a_lost_leader_never_makes_a_slot_fire_twice(
    migrated_database_url: str, tmp_path: Path, fault: str
) -> None:
    """``kill``: SIGKILL. ``stop``: SIGSTOP until the new leader fired, then SIGCONT; the
    resumed leader must step down without firing a slot the new one owns."""
    url = migrated_database_url
    args = ("--queue", "ticks:4", "--queue", "slow:1")
    first = spawn_worker(url, tmp_path, *args, start_options=OPTIONS, module=MODULE)
    second = None
    try:
        wait_registered(url, 1, first)
        old_leader = wait_for(lambda: _leader_backend(url), 10, "a leader")
        second = spawn_worker(url, tmp_path, *args, start_options=OPTIONS, module=MODULE)
        wait_registered(url, 2, first, second)
        wait_for(lambda: len(_fire_times(url)) >= 3, 15, "fires under the first leader")
        if fault == "kill":
            first.kill()
        else:
            os.kill(first.pid, signal.SIGSTOP)
        lost_at = datetime.now(UTC)
        wait_for(
            lambda: (b := _leader_backend(url)) not in (None, old_leader) and b,
            10,
            "a new leader",
            interval=0.02,
        )
        after = lost_at + timedelta(seconds=1)
        wait_for(
            lambda: sum(f > after for f in _fire_times(url)) >= 4,
            15,
            "fires under the new leader",
        )
        if fault == "stop":
            os.kill(first.pid, signal.SIGCONT)
            wait_for(
                lambda: "stepping down before acting again" in first.output(),
                15,
                "the resumed leader to step down",
            )
            resumed = len(_fire_times(url))
            wait_for(lambda: len(_fire_times(url)) >= resumed + 3, 15, "fires after the resume")
            assert _leader_backend(url) not in (None, old_leader)
    finally:
        if first.process.poll() is None:
            os.kill(first.pid, signal.SIGCONT)
            first.kill()
        code = second.stop() if second is not None else 0
    assert code == 0, second.output() if second is not None else ""
    fires = _fire_times(url)
    duplicates = {fire: n for fire, n in Counter(fires).items() if n > 1}
    assert duplicates == {}, duplicates
    ordered = sorted(fires)
    assert all(fire.microsecond == 0 for fire in ordered)
    # The schedule keeps firing: the only long gap is the failover itself, which
    # coalescing closes with one fire of the latest missed slot. (A late evaluation on a
    # busy host may also coalesce a slot, so shorter gaps are allowed anywhere.)
    gaps = [later - earlier for earlier, later in itertools.pairwise(ordered)]
    assert all(gap < timedelta(seconds=LEASE_MS / 1000 + 4) for gap in gaps), gaps
    assert ordered[0] < lost_at < ordered[-1]
