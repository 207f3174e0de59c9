"""``scripts/_venv.sh`` shows a first install's progress: one line per package pip
collects, then building, installing and done (pip's full output goes to a log)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PIP_OUTPUT = """\
Obtaining file:///src/awa
  Installing build dependencies: started
Collecting psycopg>=3.2 (from psycopg[binary,pool]>=3.2->awa-py==0.1.0)
  Downloading psycopg-3.3.9-py3-none-any.whl (212 kB)
Collecting attrs>=23.2 (from awa-py==0.1.0)
  Using cached attrs-25.1.0-py3-none-any.whl (63 kB)
Requirement already satisfied: anyio>=4.3 in ./.venv/lib/python3.11/site-packages
Building wheels for collected packages: awa-py
  Building editable for awa-py (pyproject.toml): started
Installing collected packages: attrs, psycopg, awa-py
Successfully installed attrs-25.1.0 psycopg-3.3.9 awa-py-0.1.0
"""


def test_pip_output_becomes_one_line_per_step() -> None:
    done = subprocess.run(
        ["bash", "-c", f"source {ROOT / 'scripts' / '_venv.sh'} && awa_install_progress"],
        input=PIP_OUTPUT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    # stderr is not a terminal here: plain lines, no carriage returns.
    assert done.stderr.splitlines() == [
        "    [1] collecting psycopg>=3.2 (from psycopg[binary,pool]>=3.2->awa-py==0.1.0)",
        "    [2] collecting attrs>=23.2 (from awa-py==0.1.0)",
        "    building collected packages: awa-py",
        "    building awa-py (pyproject.toml): started",
        "    installing 3 packages...",
        "    done",
    ]
    assert done.stdout == ""
