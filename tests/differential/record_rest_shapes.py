"""Record the JSON shapes of awa-cli 0.6.9's REST API over the data of ``rest_seed.py``.

    python -m tests.differential.record_rest_shapes --awa-pg-python /tmp/v/bin/python \\
        --awa-cli /tmp/v/bin/awa > tests/fixtures/awa_cli_rest_shapes.json

It makes a fresh database, seeds it under awa-pg 0.6.9 (so the original's own schema and
writes are what its server reads), starts awa-cli's ``awa serve`` on it, reads every
endpoint of :func:`rest_seed.endpoints` and prints their shapes (key names and value
types, recursively) with the raw answers beside them for reference. The web test
``tests/integration/web/test_awa_cli_shapes.py`` compares this package's answers on the
same seed with the recorded shapes.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def load_seed() -> Any:
    spec = importlib.util.spec_from_file_location("awa_rest_seed", HERE / "rest_seed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


async def child(url: str) -> None:
    """Seed under the interpreter's own ``awa``, print the endpoints, hold until stdin ends."""
    import awa

    rest_seed = load_seed()
    await awa.migrate(url)
    seeded = await rest_seed.seed(awa, url)
    print(json.dumps(rest_seed.endpoints(seeded)), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await seeded.release()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def get(base: str, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(base + path, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def record(awa_pg_python: Path, awa_cli: Path, server_url: str, settle: float) -> dict[str, Any]:
    from tests.differential.run import create_database, drop_database

    rest_seed = load_seed()
    url = create_database(server_url)
    seeder = subprocess.Popen(
        [str(awa_pg_python), "-P", str(Path(__file__).resolve()), "--child", url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    server = None
    try:
        assert seeder.stdout is not None and seeder.stdin is not None
        paths: dict[str, str] = json.loads(seeder.stdout.readline())
        port = free_port()
        server = subprocess.Popen(
            [str(awa_cli), "--database-url", url, "serve", "--port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                get(base, "/api/capabilities")
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        time.sleep(settle)  # let the runtime's first snapshot land
        answers = {label: get(base, path) for label, path in paths.items()}
        seeder.stdin.close()
        seeder.wait(timeout=30)
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
        if seeder.poll() is None:
            seeder.kill()
        drop_database(server_url, url)
    version = subprocess.run(
        [str(awa_cli), "--version"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return {
        "recorded_with": version,
        "endpoints": {label: paths[label] for label in answers},
        "status": {label: status for label, (status, _) in answers.items()},
        "shapes": {label: rest_seed.shape(body) for label, (_, body) in answers.items()},
        "answers": {label: body for label, (_, body) in answers.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", metavar="DATABASE_URL")
    parser.add_argument("--awa-pg-python", type=Path)
    parser.add_argument("--awa-cli", type=Path)
    parser.add_argument("--server-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--settle", type=float, default=3.0)
    options = parser.parse_args(argv)
    if options.child:
        asyncio.run(child(options.child))
        return 0
    if options.awa_pg_python is None or options.awa_cli is None:
        parser.error("--awa-pg-python and --awa-cli are required")
    doc = record(options.awa_pg_python, options.awa_cli, options.server_url, options.settle)
    print(json.dumps(doc, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
