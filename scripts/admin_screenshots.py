"""Take the screenshots of the admin pages (docs/screenshots/*.png).

Seeds a scratch database with jobs in every state, a runtime, cron schedules and a batch
operation, serves it with the admin app and photographs every page at desktop
(1280x800) and phone (390x844) width in headless Chromium (the system's, as in the
browser tests, which run the same checks on every page), plus the phone in dark theme:

    .venv/bin/python scripts/admin_screenshots.py [--admin-url postgresql://postgres@127.0.0.1/postgres]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from awa.adapters._pg.migrations import migrate  # noqa: E402
from awa.entrypoints.web.config import ServerConfig  # noqa: E402
from tests.integration.web.conftest import seed_everything  # noqa: E402
from tests.integration.web.live import live_server  # noqa: E402
from tests.integration.web.test_browser import (  # noqa: E402
    CHROMIUM,
    LAUNCH_ARGS,
    VIEWPORTS,
    check_and_photograph,
)

OUT = ROOT / "docs" / "screenshots"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--admin-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args()
    name = f"awa_screens_{os.getpid()}"
    with psycopg.connect(args.admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = args.admin_url.rpartition("/")[0] + "/" + name
    try:
        import asyncio

        asyncio.run(migrate(url))
        seeded = seed_everything(url)
        from playwright.sync_api import sync_playwright

        OUT.mkdir(parents=True, exist_ok=True)
        config = ServerConfig(database_url=url, cache_ttl=0.0, instance_name="staging")
        with live_server(config) as base, sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
            for viewport, size in VIEWPORTS.items():
                page = browser.new_page(viewport=size)
                check_and_photograph(page, base, seeded, viewport, OUT)
                page.close()
            phone = browser.new_page(viewport=VIEWPORTS["phone"], color_scheme="dark")
            phone.goto(base + "/")
            phone.screenshot(path=str(OUT / "phone-dark.png"), full_page=True)
            browser.close()
    finally:
        with psycopg.connect(args.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    print(f"screenshots written to {OUT}")


if __name__ == "__main__":
    main()
