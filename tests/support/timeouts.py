"""A hung test fails, with the stacks of what it waits on (a backstop to pytest-timeout).

pytest-timeout's default ``signal`` method raises ``Failed`` from a ``SIGALRM`` handler in
whatever the main thread runs at that moment. Under an event loop that may be a step of
some task (a worker's loop, a heartbeat): the task stores the exception as its own
result and dies, the test goes on waiting, and the alarm does not fire again, so the
run hangs with no stack. Its ``thread`` method cannot hang, but ends the whole process
(under pytest-xdist a crashed worker, replaced, its session's servers and databases left
behind) even when the alarm would have failed just the test.

This plugin (through pytest-timeout's ``pytest_timeout_set_timer`` hook) keeps the alarm
and adds a backstop: if the test (teardown included) has not ended ``timeout_backstop``
seconds after its alarm (ini option, default 60), a timer thread writes a report and ends
the process with ``os._exit(1)``. Under the ``thread`` method the backstop is the timeout
itself. The report adds what pytest-timeout's own leaves out:

- an async test's stack: the main thread's stack ends in the event loop's ``select``;
  the coroutines waiting are the loop's pending tasks, each followed down its awaits;
- a pytest-xdist worker's terminal output is not forwarded to the controller, so there
  the report goes to the process's standard error, which is.
"""

from __future__ import annotations

import asyncio
import gc
import io
import os
import signal
import sys
import threading
import traceback
from typing import Any

import pytest
import pytest_timeout  # type: ignore[import-untyped]


def _running_loop(thread: int) -> asyncio.AbstractEventLoop | None:
    """The event loop whose ``run_forever`` is on ``thread``'s stack, if any."""
    # The thread runs on while it is looked at: a frame may be left mid-walk, so look a
    # few times.
    for _ in range(5):
        frame = sys._current_frames().get(thread)
        while frame is not None:
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, asyncio.AbstractEventLoop) and candidate.is_running():
                return candidate
            frame = frame.f_back
    return None


def _await_chain(task: asyncio.Task[Any]) -> list[str]:
    """Where ``task`` waits: each coroutine it awaits, outermost first (a task's own
    ``print_stack`` shows the outermost frame only)."""
    lines: list[str] = []
    awaitable: Any = task.get_coro()
    for _ in range(100):  # a chain is short; the bound keeps a cycle from hanging here
        if awaitable is None:
            break
        frame = (
            getattr(awaitable, "cr_frame", None)
            or getattr(awaitable, "gi_frame", None)
            or getattr(awaitable, "ag_frame", None)
        )
        if frame is not None:
            lines.extend(traceback.format_stack(frame, limit=1))
            awaitable = (
                getattr(awaitable, "cr_await", None)
                or getattr(awaitable, "gi_yieldfrom", None)
                or getattr(awaitable, "ag_await", None)
            )
            continue
        # An async generator's ``asend``/``athrow`` (an async fixture's teardown) or a
        # future's iterator: what it refers to is the next link.
        inner = [
            ref
            for ref in gc.get_referents(awaitable)
            if hasattr(ref, "ag_frame") or isinstance(ref, asyncio.Future)
        ]
        if not inner:
            lines.append(f"  awaiting {awaitable!r}\n")
            break
        awaitable = inner[0]
        if isinstance(awaitable, asyncio.Future):
            lines.append(f"  awaiting {awaitable!r}\n")
            break
    return lines


def pending_task_stacks(thread: int) -> str:
    """Where each pending task of the event loop running on ``thread`` waits."""
    loop = _running_loop(thread)
    if loop is None:
        return ""
    try:
        tasks = asyncio.all_tasks(loop)
    except RuntimeError:  # the task set kept changing while it was listed
        return "(the event loop's tasks could not be listed)\n"
    out = io.StringIO()
    for task in sorted(tasks, key=lambda t: t.get_name()):
        out.write(f"~~~~~ task {task.get_name()}\n")
        out.writelines(_await_chain(task))
    return out.getvalue()


def hang_report(nodeid: str, timeout: float) -> str:
    """Every thread's stack, then the pending tasks of a running event loop."""
    out = io.StringIO()
    out.write(f"+++++ Timeout (>{timeout}s): {nodeid}\n")
    current = threading.get_ident()
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    frames = sys._current_frames()
    for ident, frame in frames.items():
        if ident == current:
            continue
        out.write(f"~~~~~ thread {names.get(ident, '<unknown>')} ({ident})\n")
        out.write("".join(traceback.format_stack(frame)))
    main = threading.main_thread().ident
    tasks = pending_task_stacks(main) if main is not None else ""
    if tasks:
        out.write("~~~~~ pending asyncio tasks of the main thread's event loop\n")
        out.write(tasks)
    out.write(f"+++++ Timeout (>{timeout}s): {nodeid}\n")
    return out.getvalue()


def _on_timeout(item: pytest.Item, settings: Any) -> None:
    try:
        captured = ""
        capman: Any = item.config.pluginmanager.getplugin("capturemanager")
        if capman is not None:
            # Give the real standard output and error back before writing to them.
            capman.suspend_global_capture(item)
            out, err = capman.read_global_capture()
            if out:
                captured += f"~~~~~ captured stdout\n{out}\n"
            if err:
                captured += f"~~~~~ captured stderr\n{err}\n"
        report = captured + hang_report(item.nodeid, settings.timeout)
        if hasattr(item.config, "workerinput"):
            os.write(2, report.encode("utf-8", "backslashreplace"))
        else:
            terminal = item.config.get_terminal_writer()
            terminal.write(report)
            terminal.flush()
    except BaseException:  # a failed report must not keep the process alive
        os.write(2, traceback.format_exc().encode("utf-8", "backslashreplace"))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


BACKSTOP_INI = "timeout_backstop"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        BACKSTOP_INI,
        "seconds after a test's timeout alarm (pytest-timeout's signal method) before the"
        " process ends with the stacks of a test that did not stop (tests/support/timeouts.py)",
        default="60",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool:
    alarm = settings.method == "signal" and threading.current_thread() is threading.main_thread()
    backstop = settings.timeout
    if alarm:
        backstop += float(item.config.getini(BACKSTOP_INI))

        def handler(signum: int, frame: object) -> None:
            __tracebackhide__ = True
            pytest_timeout.timeout_sigalrm(item, settings)

        signal.signal(signal.SIGALRM, handler)
        signal.setitimer(signal.ITIMER_REAL, settings.timeout)
    timer = threading.Timer(backstop, _on_timeout, (item, settings))
    timer.name = f"awa-test-timeout {item.nodeid}"
    timer.daemon = True

    def cancel() -> None:
        timer.cancel()
        timer.join()
        if alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)

    # pytest-timeout's ``pytest_timeout_cancel_timer`` calls this.
    item.cancel_timeout = cancel  # type: ignore[attr-defined]
    timer.start()
    return True
