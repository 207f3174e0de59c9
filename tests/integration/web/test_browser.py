"""The pages as a person uses them, in headless Chromium driven by Playwright.

Chromium comes from the system (Debian's ``chromium`` package, ``/usr/bin/chromium``, or
``AWA_CHROMIUM``); Playwright never downloads a browser. Without one these tests skip
and say why.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from awa.entrypoints.web.config import ServerConfig
from tests.integration.web.conftest import (
    HISTORY,
    HISTORY_FAILED,
    RUNTIME_ID,
    SAMPLES,
    Seeded,
    seed_everything,
)
from tests.integration.web.live import live_server

pytestmark = pytest.mark.postgres

REBIND_HOST = "rebind.attacker.test"
CHROMIUM = os.environ.get("AWA_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    # A DNS-rebinding attacker's name that resolves to this machine.
    f"--host-resolver-rules=MAP {REBIND_HOST} 127.0.0.1",
]
TOKEN = "browser-token"

if not os.path.exists(CHROMIUM):
    pytest.skip(
        f"no Chromium at {CHROMIUM}: install Debian's chromium package "
        "(apt-get install -y chromium) or set AWA_CHROMIUM to run the browser tests",
        allow_module_level=True,
    )
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        yield page
    finally:
        context.close()


#: Every page of the admin UI, by the name its screenshots carry.
def every_page(seeded: Seeded) -> dict[str, str]:
    return {
        "dashboard": "/",
        "jobs": "/jobs",
        "job": f"/jobs/{seeded.ids['failed'][0]}",
        "queues": "/queues",
        "queue": "/queues/mail",
        "kinds": "/kinds",
        "cron": "/cron",
        "dlq": "/dlq",
        "dlq-entry": f"/dlq/{seeded.ids['dlq'][0]}",
        "batch-ops": "/batch-ops",
        "runtime": "/runtime",
        "runtime-instance": f"/runtime/{RUNTIME_ID}",
    }


VIEWPORTS = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}
#: Python reprs that must never reach a person: None, booleans, a list's brackets.
REPR_TEXT = re.compile(r"\bNone\b|\bTrue\b|\bFalse\b|\['|\[\]")
REPR_ATTRIBUTE = re.compile(r'="(None|True|False)"')


def check_and_photograph(page: Any, base: str, seeded: Seeded, viewport: str, out: Any) -> None:
    """Visit every page at ``viewport``: each answers 200, shows no Python repr in its
    text or attributes and, at any width, never scrolls sideways; a full-page screenshot
    of each is written to ``out/<page>-<viewport>.png``."""
    for name, path in every_page(seeded).items():
        response = page.goto(base + path)
        assert response is not None and response.status == 200, (path, response)
        text = page.inner_text("body")
        found = REPR_TEXT.search(text)
        if found is not None:
            around = text[max(0, found.start() - 60) : found.end() + 60]
            raise AssertionError(f"{path} shows {found.group(0)!r}: ...{around}...")
        html = page.content()
        attribute = REPR_ATTRIBUTE.search(html)
        assert attribute is None, f"{path} has an attribute {attribute.group(0)}"
        fits = page.evaluate("document.scrollingElement.scrollWidth <= window.innerWidth")
        width = page.evaluate("document.scrollingElement.scrollWidth")
        assert fits, f"{path} scrolls sideways at {viewport} width ({width}px)"
        page.screenshot(path=str(out / f"{name}-{viewport}.png"), full_page=True)


def serve(seeded: Seeded, **settings: Any) -> Any:
    settings.setdefault("cache_ttl", 0.0)
    return live_server(ServerConfig(database_url=seeded.url, **settings))


def db_state(url: str, job_id: int) -> str | None:
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT state::text FROM awa.jobs WHERE id = %s", (job_id,)).fetchone()
    return None if row is None else str(row[0])


def test_dashboard_counts_match_the_database(page: Any, seeded: Seeded) -> None:
    with psycopg.connect(seeded.url) as conn:
        expected: dict[str, int] = dict(
            conn.execute("SELECT state::text, count(*) FROM awa.jobs GROUP BY 1")
        )
    with serve(seeded) as base:
        page.goto(base + "/")
        for state in ("available", "running", "completed", "failed", "cancelled", "scheduled"):
            card = page.locator(f'.card[data-state="{state}"] .count')
            assert int(card.inner_text()) == expected.get(state, 0), state
        assert page.locator('.card[data-state="dlq"] .count').inner_text() == "1"


def test_filtering_jobs(page: Any, seeded: Seeded) -> None:
    with serve(seeded) as base:
        page.goto(base + "/jobs")
        page.locator('.pills a[data-state="failed"]').click()
        page.wait_for_url(re.compile(r"state=failed"))
        ids = sorted(
            int(r)
            for r in page.locator("tr[data-job-id]").evaluate_all(
                "rows => rows.map(r => r.dataset.jobId)"
            )
        )
        assert ids == sorted(seeded.ids["failed"])
        page.goto(base + "/jobs")
        page.fill('input[name="q"]', "tag:vip")
        page.get_by_role("button", name="Filter").click()
        page.wait_for_url(re.compile(r"q=tag"))
        shown = page.locator("tr[data-job-id]").count()
        assert shown == len(seeded.ids["available"])


def test_retry_a_failed_job_from_its_page(page: Any, seeded: Seeded) -> None:
    failed = seeded.ids["failed"][0]
    with serve(seeded) as base:
        page.goto(f"{base}/jobs/{failed}")
        page.get_by_role("button", name="Retry", exact=True).click()
        page.get_by_text(f"Retried job {failed}").wait_for()
    assert db_state(seeded.url, failed) == "available"


def test_pause_a_queue(page: Any, seeded: Seeded) -> None:
    with serve(seeded) as base:
        page.goto(base + "/queues")
        page.locator('tr[data-queue="mail"]').get_by_role("button", name="Pause").click()
        page.get_by_text("Paused mail").wait_for()
        assert page.locator('tr[data-queue="mail"] .badge', has_text="paused").count() == 1
    with psycopg.connect(seeded.url) as conn:
        row = conn.execute("SELECT paused FROM awa.queue_meta WHERE queue = 'mail'").fetchone()
    assert row is not None and row[0] is True


def test_retry_from_the_dlq(page: Any, seeded: Seeded) -> None:
    dead = seeded.ids["dlq"][0]
    assert db_state(seeded.url, dead) is None
    with serve(seeded) as base:
        page.goto(base + "/dlq")
        page.locator(f'tr[data-job-id="{dead}"]').get_by_role("button", name="Retry").click()
        page.get_by_text(f"Retried job {dead} from the DLQ").wait_for()
        assert page.locator(f'tr[data-job-id="{dead}"]').count() == 0
    assert db_state(seeded.url, dead) == "available"


def test_read_only_mode_hides_the_buttons(page: Any, seeded: Seeded) -> None:
    with serve(seeded, read_only=True) as base:
        page.goto(f"{base}/jobs/{seeded.ids['failed'][0]}")
        assert page.locator(".badge.ro").inner_text() == "read-only"
        assert page.get_by_role("button", name="Retry").count() == 0
        page.goto(base + "/queues")
        assert page.get_by_role("button", name="Pause").count() == 0
        page.goto(base + "/jobs")
        assert page.locator('input[name="ids"]').count() == 0
        page.goto(base + "/dlq")
        assert page.get_by_role("button", name="Retry").count() == 0


def test_the_auth_token_guards_the_pages(page: Any, seeded: Seeded) -> None:
    with serve(seeded, auth_token=TOKEN) as base:
        page.goto(base + "/queues")
        page.wait_for_url(re.compile(r"/login"))
        page.fill('input[name="token"]', "wrong")
        page.get_by_role("button", name="Log in").click()
        page.get_by_text("That token is not right.").wait_for()
        page.fill('input[name="token"]', TOKEN)
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(re.compile(r"/queues$"))
        assert page.locator("h1").inner_text() == "Queues"
        status = page.evaluate("fetch('/api/stats').then(r => r.status)")
        assert status == 200
        page.get_by_role("button", name="Log out").click()
        page.wait_for_url(re.compile(r"/login"))


def test_phone_width_and_dark_theme(browser: Any, seeded: Seeded) -> None:
    context = browser.new_context(viewport=VIEWPORTS["phone"], color_scheme="dark")
    page = context.new_page()
    try:
        with serve(seeded) as base:
            page.goto(base + "/queues")
            background = page.evaluate("getComputedStyle(document.body).backgroundColor")
            assert background == "rgb(15, 18, 22)"
            page.locator("#theme-toggle").click()  # system -> light
            light = page.evaluate("getComputedStyle(document.body).backgroundColor")
            assert light == "rgb(247, 248, 250)"
    finally:
        context.close()


def test_pages_refresh_themselves(page: Any, seeded: Seeded) -> None:
    with serve(seeded) as base:
        page.goto(base + "/queues")
        row = page.locator('tr[data-queue="mail"]')
        assert row.locator(".badge", has_text="paused").count() == 0
        with psycopg.connect(seeded.url, autocommit=True) as conn:
            conn.execute("INSERT INTO awa.queue_meta (queue, paused) VALUES ('mail', true)")
        # No reload: the content is fetched again after one poll interval (5 s).
        row.locator(".badge", has_text="paused").wait_for(timeout=15_000)


def test_a_dns_rebinding_page_cannot_reach_the_server(page: Any, seeded: Seeded) -> None:
    """A page of another site whose name now resolves to 127.0.0.1 is same-origin with
    itself, so its scripts could call the API: the Host check refuses every request."""
    pending = seeded.ids["available"][0]
    with serve(seeded) as base:
        port = base.rsplit(":", 1)[1]
        response = page.goto(f"http://{REBIND_HOST}:{port}/")
        assert response is not None and response.status == 400
        assert "not served" in page.content()
        status = page.evaluate(
            """async () => (await fetch("/api/queues/mail/drain", {
                method: "POST", headers: {"Content-Type": "application/json"}, body: "{}"
            })).status"""
        )
        assert status == 400
        page.goto(base + "/queues")  # the real origin still works
        assert page.locator("text=mail").first.is_visible()
    assert db_state(seeded.url, pending) == "available"


@pytest.fixture
def everything(migrated_database_url: str) -> Seeded:
    return seed_everything(migrated_database_url)


@pytest.mark.parametrize("viewport", sorted(VIEWPORTS))
def test_every_page_speaks_to_people(
    browser: Any, everything: Seeded, viewport: str, tmp_path: Any
) -> None:
    """Each page at desktop and phone width: no reprs, no sideways scroll, and a
    screenshot (kept under ``AWA_SCREENSHOT_DIR`` when set, as scripts/admin_screenshots.py
    does for docs/screenshots)."""
    out = Path(os.environ.get("AWA_SCREENSHOT_DIR") or tmp_path)
    context = browser.new_context(viewport=VIEWPORTS[viewport])
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        with serve(everything) as base:
            check_and_photograph(page, base, everything, viewport, out)
            # The header's links all stay inside the window: they wrap, none is cut off.
            page.goto(base + "/")
            right = page.locator("header nav a").evaluate_all(
                "links => links.map(a => a.getBoundingClientRect().right)"
            )
            assert len(right) == 8 and max(right) <= VIEWPORTS[viewport]["width"], right
    finally:
        context.close()
    shots = sorted(p.name for p in out.glob(f"*-{viewport}.png"))
    assert shots == sorted(f"{name}-{viewport}.png" for name in every_page(everything))


def test_the_job_list_counts_states_and_shows_tags(page: Any, everything: Seeded) -> None:
    ids = everything.ids
    expected = {s: len(ids[s]) for s in ("available", "running", "cancelled", "scheduled")}
    expected["completed"] = len(ids["completed"]) + len(ids["history_completed"])
    expected["failed"] = len(ids["failed"]) + len(ids["history_failed"])
    with serve(everything) as base:
        page.goto(base + "/jobs")
        for state, n in expected.items():
            pill = page.locator(f'.pills a[data-state="{state}"]')
            assert int(pill.locator(".n").inner_text()) == n, state
        assert int(page.locator('.pills a[data-state="all"] .n').inner_text()) == sum(
            expected.values()
        )
        page.locator('.pills a[data-state="failed"]').click()
        page.wait_for_url(re.compile(r"state=failed"))
        shown = page.locator("tr[data-job-id]").evaluate_all(
            "rows => rows.map(r => r.dataset.jobId)"
        )
        assert sorted(int(i) for i in shown) == sorted(ids["failed"] + ids["history_failed"])
        tags = page.locator(f'tr[data-job-id="{everything.ids["failed"][0]}"] td.tags').inner_text()
        assert tags.strip() == "nightly"
        page.goto(base + "/queues/mail")
        assert int(page.locator('.pills a[data-state="available"] .n').inner_text()) == 3
        mail_failed = [q for _, q in HISTORY_FAILED].count("mail")
        assert int(page.locator('.pills a[data-state="failed"] .n').inner_text()) == mail_failed
        page.locator("td.tags a", has_text="vip").first.click()
        page.wait_for_url(re.compile(r"q=tag"))
        assert page.locator("tr[data-job-id]").count() == len(everything.ids["available"])


def test_recent_failures_include_dead_lettered_jobs(page: Any, everything: Seeded) -> None:
    dead = everything.ids["dlq"][0]
    with serve(everything) as base:
        page.goto(base + "/")
        rows = page.locator("table.failures tr[data-job-id]")
        shown = sorted(int(i) for i in rows.evaluate_all("rows => rows.map(r => r.dataset.jobId)"))
        ids = everything.ids
        assert shown == sorted([*ids["failed"], *ids["history_failed"], dead])
        row = page.locator(f'table.failures tr[data-job-id="{dead}"]')
        assert "DLQ" in row.inner_text() and "manual" in row.inner_text()
        row.get_by_role("link", name=str(dead)).click()
        page.wait_for_url(re.compile(rf"/dlq/{dead}$"))


def test_runtime_pages_say_yes_no_and_dash(page: Any, everything: Seeded) -> None:
    with serve(everything) as base:
        page.goto(f"{base}/runtime/{RUNTIME_ID}")
        facts = page.locator("dl.facts").inner_text()
        assert "Healthy\nyes" in facts and "Shutting down\nno" in facts, facts
        cells = page.locator("tbody tr").first.locator("td").all_inner_texts()
        assert cells[:4] == ["mail", "2", "10", "—"], cells
        page.goto(base + "/runtime")
        storage = page.locator("section.storage dl.facts").first.inner_text()
        assert "Prepared engine\n—" in storage, storage
        assert page.locator("section.storage dl.facts").first.locator("ul.plain li").count() >= 1


def chart_numbers(page: Any, chart: str) -> tuple[dict[str, int], dict[str, int]]:
    """A chart's legend totals by queue, and the counts its bars' tooltips add up to."""
    legend = page.locator(f"#{chart} .legend li").evaluate_all(
        "items => items.map(li => [li.firstChild.nextSibling.textContent.trim(),"
        " li.querySelector('strong').textContent])"
    )
    bars: dict[str, int] = {}
    for title in page.locator(f"#{chart} rect title").all_text_contents():
        queue, _, rest = title.split(" · ", 1)[1].partition(": ")
        bars[queue] = bars.get(queue, 0) + int(rest.split()[0])
    return {name: int(total) for name, total in legend}, bars


def test_dashboard_charts_count_the_last_hour_per_queue(page: Any, everything: Seeded) -> None:
    completed = {"mail": 0, "reports": len(everything.ids["completed"])}
    for _, per_queue in HISTORY:
        for queue, n in per_queue.items():
            completed[queue] += n
    failed = {"mail": len(everything.ids["dlq"]), "reports": len(everything.ids["failed"])}
    for _, queue in HISTORY_FAILED:
        failed[queue] += 1
    with serve(everything) as base:
        page.goto(base + "/")
        assert chart_numbers(page, "chart-throughput") == (completed, completed)
        # The failures count the dead-lettered job of mail, which is no longer a job.
        assert chart_numbers(page, "chart-failures") == (failed, failed)
        minutes = {m for m, per_queue in HISTORY for n in per_queue.values() if n}
        assert page.locator("#chart-failures rect").count() == len(HISTORY_FAILED) + 2
        assert page.locator("#chart-throughput rect").count() == 1 + sum(
            1 for _, per_queue in HISTORY for n in per_queue.values() if n
        )
        assert len(minutes) > 10  # bars across the hour, not one


def test_dashboard_draws_depth_and_lag_over_the_hour(page: Any, everything: Seeded) -> None:
    latest = {q: (n, lag) for m, q, n, lag in SAMPLES if m == 0}
    with serve(everything) as base:
        page.goto(base + "/")
        depth = page.locator("#chart-depth .legend li strong").all_text_contents()
        assert depth == [str(latest["mail"][0]), str(latest["reports"][0])]
        lag = page.locator("#chart-lag .legend li strong").all_text_contents()
        assert lag == [f"{latest['mail'][1]:g}s", f"{latest['reports'][1]:g}s"]
        # One point per sample; each queue's line breaks where the leader was away.
        assert page.locator("#chart-depth circle").count() == len(SAMPLES)
        assert page.locator("#chart-depth polyline").count() == 4
        title = page.locator("#chart-lag circle title").first.text_content()
        assert title is not None and " · mail: " in title and title.endswith("s lag")
