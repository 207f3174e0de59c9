"""Run one scenario under whichever ``awa`` this interpreter imports; print JSON.

Usage: ``python -P probe.py SCENARIO DATABASE_URL``. The runner starts it with ``-P`` and a
working directory outside the repository, so the interpreter's own installed ``awa`` is
the one under test. The last line of stdout is the observation as JSON.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any


def load_scenarios() -> Any:
    path = Path(__file__).with_name("scenarios.py")
    spec = importlib.util.spec_from_file_location("awa_differential_scenarios", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


async def run(name: str, url: str) -> dict[str, Any]:
    import awa

    scenarios = load_scenarios()
    await awa.migrate(url)
    try:
        observation: dict[str, Any] = await asyncio.wait_for(
            scenarios.SCENARIOS[name](awa, url), timeout=60
        )
    except Exception as exc:
        observation = {"scenario_crashed": scenarios.error_of(exc)}
    return observation


def main() -> None:
    name, url = sys.argv[1], sys.argv[2]
    observation = asyncio.run(run(name, url))
    print(json.dumps(observation, sort_keys=True, default=str))


if __name__ == "__main__":
    main()
