"""A program that raises without closing its client exits, printing only its own error.

Each case runs a real script in a subprocess against Postgres, with SIGINT at its default
and with SIGINT ignored (``python app.py &`` in a shell script), and waits for it to exit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = [pytest.mark.postgres]

ROOT = Path(__file__).resolve().parents[2]

# The worker has claimed and is running jobs when the script raises.
ASYNC_SCRIPT = """
import asyncio, sys
import attrs, awa

@attrs.define
class Work:
    n: int

client = awa.AsyncClient(sys.argv[1])
started = asyncio.Event()

@client.task(Work)
async def handle(job: awa.Job[Work]) -> None:
    started.set()
    await asyncio.sleep(0.05)

async def main() -> None:
    await client.insert_many_copy([Work(n=i) for i in range(200)])
    await client.start([("default", 4)])
    await started.wait()
    print("raising now", file=sys.stderr, flush=True)
    raise RuntimeError("the user's own error")

asyncio.run(main())
"""

SYNC_SCRIPT = """
import sys
import attrs, awa

@attrs.define
class Work:
    n: int

client = awa.Client(sys.argv[1])
client.insert(Work(n=1))
client.list_jobs(limit=5)
print("raising now", file=sys.stderr, flush=True)
raise RuntimeError("the user's own error")
"""


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("script", [ASYNC_SCRIPT, SYNC_SCRIPT], ids=["async", "sync"])
@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_a_failing_script_exits_with_only_its_traceback(
    migrated_database_url: str, tmp_path: Path, script: str, sigint: str
) -> None:
    path = tmp_path / "app.py"
    path.write_text(script)
    preexec: Callable[[], None] | None = _ignore_sigint if sigint == "ignored" else None
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    process = subprocess.run(
        [sys.executable, str(path), migrated_database_url],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=preexec,
        # Generous: the program exits well within a second of raising; a hang fails here.
        timeout=60,
    )
    assert process.returncode == 1, process.stderr
    # What the worker logged while it ran is its business; from the moment the program
    # raises, the only output is the program's own traceback.
    _, marker, after = process.stderr.partition("raising now\n")
    assert marker, process.stderr
    assert after.count("Traceback (most recent call last)") == 1, after
    assert after.startswith("Traceback (most recent call last)"), after
    assert after.rstrip().endswith("RuntimeError: the user's own error"), after
    for noise in ("psycopg", "PoolTimeout", "Task was destroyed", "awa."):
        assert noise not in after, after
