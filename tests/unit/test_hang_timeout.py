"""A hung async test fails with the stack of the coroutine it waits on
(``tests/support/timeouts.py``), here an async fixture's teardown beside a task that holds
the event loop: pytest-timeout's alarm lands in that task, which dies of it, and the
teardown waits on until the backstop ends the process with the stacks."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

HUNG = textwrap.dedent(
    """
    import asyncio

    import pytest


    @pytest.fixture(scope="session")
    def anyio_backend():
        return "asyncio"


    async def busy_background_loop():
        # Holds the main thread for good once it runs: the alarm can land nowhere but
        # here (what this test is about), and the task dies of it. A loop that yielded
        # between steps let the alarm land in the event loop's own turn now and then (in
        # one of four clean-clone runs on a busy host), and the test then failed by
        # pytest-timeout's own error instead of hanging.
        while True:
            sum(range(2_000_000))


    async def wait_for_what_never_comes():
        await asyncio.Event().wait()


    @pytest.fixture
    async def teardown_that_never_ends():
        background = asyncio.create_task(busy_background_loop())
        yield
        await wait_for_what_never_comes()
        background.cancel()


    @pytest.mark.anyio
    async def test_hangs_beside_a_busy_task(teardown_that_never_ends):
        pass
    """
)


def _run(
    tmp_path: Path, *extra: str, extra_plugins: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_hung.py").write_text(HUNG)
    # Only the plugins the run needs: the others cost seconds to import.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    plugins = ["anyio", "pytest_timeout", "tests.support.timeouts", *extra_plugins]
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            *[arg for plugin in plugins for arg in ("-p", plugin)],
            "--rootdir",
            str(tmp_path),
            "-c",
            os.devnull,
            "--timeout=1",
            "-o",
            "timeout_backstop=1",
            *extra,
            "test_hung.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,  # the guard of this test itself: the run under test must end on its own
        check=False,
    )


def test_a_hung_async_test_fails_with_the_stack_it_waits_on(tmp_path: Path) -> None:
    result = _run(tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "Timeout (>1.0s): test_hung.py::test_hangs_beside_a_busy_task" in output, output
    assert "pending asyncio tasks" in output
    # The awaiting coroutine, which the main thread's own stack (the loop's select) hides.
    assert "in wait_for_what_never_comes" in output


@pytest.mark.skipif(
    __import__("importlib.util").util.find_spec("xdist") is None, reason="needs pytest-xdist"
)
def test_a_hung_test_in_an_xdist_worker_reports_its_stack_to_the_controller(
    tmp_path: Path,
) -> None:
    result = _run(tmp_path, "-n", "1", extra_plugins=("xdist.plugin",))
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "crashed while running 'test_hung.py::test_hangs_beside_a_busy_task'" in output
    assert "in wait_for_what_never_comes" in output
