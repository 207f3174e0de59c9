"""The workflow and key pages as a person sees them, in headless Chromium: a job's
parents, children and result, the workflow graph around it (server-rendered SVG, each
step with its state), a queue's concurrency keys and a held-back job's reason, at
desktop and phone width with no Python repr and no sideways scroll."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.workflow_seed import KEYED, seed_workflow
from tests.integration.web.conftest import Seeded
from tests.integration.web.test_browser import REPR_TEXT, VIEWPORTS, browser, serve

pytestmark = pytest.mark.postgres

__all__ = ["browser"]


def workflow_pages(ids: dict[str, int]) -> dict[str, str]:
    return {
        "job-workflow": f"/jobs/{ids['report']}",
        "job-result": f"/jobs/{ids['extract']}",
        "workflow-graph": f"/jobs/{ids['report']}/graph",
        "workflow-failed": f"/jobs/{ids['cleanup']}/graph",
        "job-batch": f"/jobs/{ids['batch']}",
        "queue-keys": f"/queues/{KEYED}",
        "job-held-back": f"/jobs/{ids['keyed_held']}",
    }


def graph_states(page: Any) -> dict[int, str]:
    found = page.locator("svg a.node").evaluate_all(
        "nodes => nodes.map(n => [n.dataset.job, n.dataset.state])"
    )
    return {int(job): state for job, state in found}


@pytest.mark.parametrize("viewport", sorted(VIEWPORTS))
def test_workflow_pages_show_the_seeded_states(
    browser: Any, migrated_database_url: str, viewport: str, tmp_path: Path
) -> None:
    ids = seed_workflow(migrated_database_url)
    out = Path(os.environ.get("AWA_SCREENSHOT_DIR") or tmp_path)
    context = browser.new_context(viewport=VIEWPORTS[viewport])
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        with serve(Seeded(migrated_database_url, {})) as base:
            for name, path in workflow_pages(ids).items():
                response = page.goto(base + path)
                assert response is not None and response.status == 200, path
                text = page.inner_text("body")
                assert REPR_TEXT.search(text) is None, (path, REPR_TEXT.search(text))
                fits = page.evaluate("document.scrollingElement.scrollWidth <= window.innerWidth")
                assert fits, f"{path} scrolls sideways at {viewport} width"
                page.screenshot(path=str(out / f"{name}-{viewport}.png"), full_page=True)

            page.goto(base + f"/jobs/{ids['report']}/graph")
            assert graph_states(page) == {
                ids["extract"]: "completed",
                ids["load"]: "available",
                ids["report"]: "scheduled",
                ids["notify"]: "scheduled",
            }
            assert page.locator("svg line.edge").count() == 3
            assert page.locator("svg a.node.current").get_attribute("data-job") == str(
                ids["report"]
            )
            page.goto(base + f"/jobs/{ids['cleanup']}/graph")
            assert graph_states(page) == {ids["broken"]: "failed", ids["cleanup"]: "cancelled"}

            page.goto(base + f"/jobs/{ids['report']}")
            parents = page.locator(".workflow-edges .panel").nth(0).inner_text()
            assert f"#{ids['extract']}" in parents and "completed" in parents
            assert f"#{ids['load']}" in parents and "available" in parents
            assert "Waiting on 1 of 2 parent(s)." in page.inner_text("body")
            # its run_at is the waiting marker, not a time to show
            assert page.locator("dd.run-at").inner_text() == "waiting for 1 parent"
            assert page.locator("dd.run-at time").count() == 0
            assert "No result stored" in page.locator("section.result").inner_text()
            page.click("text=Workflow graph →")
            assert page.url.endswith(f"/jobs/{ids['report']}/graph")

            page.goto(base + f"/jobs/{ids['batch']}")
            batch = page.locator("section.batch")
            assert "Callback of a batch of 3 job(s)" in batch.inner_text()
            assert batch.locator("progress").get_attribute("value") == "2"
            cells = batch.locator("dl.batch-counts dd").evaluate_all(
                "cells => cells.map(c => c.innerText)"
            )
            assert cells == ["1", "1", "0", "1"]

            page.goto(base + f"/jobs/{ids['extract']}")
            result = page.locator("section.result").inner_text()
            assert '"rows": 42' in result and "No result stored" not in result
            assert page.locator("dd.run-at time").count() == 1

            page.goto(base + f"/queues/{KEYED}")
            rows = page.locator("section.keys tbody tr").evaluate_all(
                "rows => rows.map(r => [...r.cells].map(c => c.innerText.trim()))"
            )
            assert rows == [["tenant-a", "1", "2", "2"], ["tenant-b", "0", "1", "0"]]
            limits = page.locator("section.keys").inner_text()
            assert "Per-key limit: 1 (override)" in limits
            assert "Fleet-wide rate limit: 5.0/s, burst 10 (override)" in limits

            page.goto(base + f"/jobs/{ids['keyed_held']}")
            held = page.locator("section.held-back").inner_text()
            assert "held back: key tenant-a has 1 of 1 running (max_running_per_key)" in held
            page.click(f"text=Keys and limits of {KEYED} →")
            assert page.url.endswith(f"/queues/{KEYED}")
            page.goto(base + f"/jobs/{ids['keyed_free']}")
            assert page.locator("section.held-back").count() == 0
    finally:
        context.close()
