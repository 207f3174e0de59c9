"""``awa worker``: run the handlers of a user module as one or more worker processes.

The module named by ``--module`` registers its handlers on an :class:`~awa.AsyncClient`
and exposes it in one of two ways (checked in this order):

- ``create_client(database_url)``: a function (plain or ``async``) returning the client;
  it receives the ``--database-url`` / ``$DATABASE_URL`` value (``None`` when unset) if
  it accepts an argument;
- ``client``: a module-level ``AsyncClient``.

An optional module-level ``start_options`` dict is passed to ``client.start()`` as
keyword arguments (e.g. ``{"heartbeat_interval_ms": 5000}``); ``--queue`` options, when
given, replace its ``queues`` and the worker serves exactly those queues: handlers
registered for other queues do not run in it (a warning names them). Without either, the
queues of the registered handlers are served with 10 workers each.

SIGINT or SIGTERM stops claiming and lets running handlers finish for up to
``--shutdown-timeout-ms`` before they are cancelled and their attempts released; a second
signal exits at once (the attempts are then rescued by heartbeat staleness).

``--processes N`` (``0`` = one per CPU core) starts N worker processes, each with its own
runtime, and supervises them: signals are forwarded, and if one exits with an error the
others are stopped and the command exits with status 1.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os
import signal
import subprocess
import sys
import sysconfig
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, Any

import click

from awa.adapters._pg import conninfo
from awa.entrypoints import logs
from awa.entrypoints.cli._common import fail, redact_url, state
from awa.entrypoints.cli._logging import log_options
from awa.entrypoints.environment import LISTEN_URL_ENV
from awa.entrypoints.health import HEALTH_ADDR_ENV, parse_addr

if TYPE_CHECKING:
    from awa.entrypoints.client_async import AsyncClient

log = logging.getLogger("awa.worker")

#: How often the supervisor checks on its children.
_SUPERVISE_TICK = 0.2
#: How long the supervisor waits for children to stop after forwarding a signal, beyond
#: their own shutdown timeout, before killing them.
_STOP_GRACE = 10.0


def parse_queue(spec: str) -> tuple[str, int]:
    """``name`` or ``name:N`` (N >= 1; default 10) as a ``start()`` queue tuple."""
    name, sep, count = spec.rpartition(":")
    if not sep:
        name, count = spec, "10"
    if not name:
        raise click.BadParameter(f"{spec!r}: the queue name is empty", param_hint="--queue")
    try:
        workers = int(count)
    except ValueError:
        raise click.BadParameter(
            f"{spec!r}: expected NAME or NAME:WORKERS", param_hint="--queue"
        ) from None
    if workers < 1:
        raise click.BadParameter(f"{spec!r}: workers must be >= 1", param_hint="--queue")
    return name, workers


def import_user_module(name: str) -> ModuleType:
    """Import ``name``, looking in the current directory first like ``python -m`` does.

    An error raised while importing it is reported with the place in the user's code it
    came from (``--debug`` shows the whole traceback)."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and name.startswith(exc.name):
            raise fail(f"cannot import module {name!r}: {exc}") from exc
        if state().debug:
            raise
        raise fail(_import_failure(name, exc)) from exc
    except Exception as exc:
        if state().debug:
            raise
        raise fail(_import_failure(name, exc)) from exc


def _import_failure(name: str, exc: BaseException) -> str:
    """``importing MODULE failed: TYPE: message`` and, when one is found, the last frame
    of the user's own code in the traceback (file, line, function, source line)."""
    text = f"importing module {name!r} failed: {type(exc).__name__}: {exc}"
    frame = _last_user_frame(exc)
    if frame is not None:
        text += f'\n  File "{frame.filename}", line {frame.lineno}, in {frame.name}'
        if frame.line:
            text += f"\n    {frame.line.strip()}"
        text += "\n(run with --debug for the whole traceback)"
    return text


def _library_dirs() -> tuple[str, ...]:
    """The standard library's and installed packages' directories, then awa's own."""
    paths = sysconfig.get_paths()
    dirs = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    awa_dir = str(Path(__file__).resolve().parents[2])
    return (*(os.path.join(os.path.realpath(d), "") for d in dirs), os.path.join(awa_dir, ""))


def _last_user_frame(exc: BaseException) -> traceback.FrameSummary | None:
    """The deepest frame of ``exc``'s traceback outside the standard library, installed
    packages, awa and importlib: the line of the user's code that raised (or called
    what raised)."""
    library = _library_dirs()
    awa_dir = library[-1] if library else ""
    user = None
    outside_awa = None
    for frame in traceback.extract_tb(exc.__traceback__):
        filename = frame.filename
        if filename.startswith("<"):
            continue
        real = os.path.realpath(filename)
        if not real.startswith(awa_dir):
            outside_awa = frame
        if not real.startswith(library):
            user = frame
    # An application installed into site-packages has no frame outside the libraries.
    return user if user is not None else outside_awa


async def load_client(module: ModuleType, database_url: str | None) -> AsyncClient:
    """The client the module exposes through ``create_client`` or ``client``."""
    from awa.entrypoints.client_async import AsyncClient

    factory = getattr(module, "create_client", None)
    if callable(factory):
        accepts_url = bool(inspect.signature(factory).parameters)
        made: Any = factory(database_url) if accepts_url else factory()
        if inspect.isawaitable(made):
            made = await made
    elif hasattr(module, "client"):
        made = module.client
        if isinstance(made, AsyncClient) and database_url is not None:
            _check_same_database(module.__name__, made, database_url)
    else:
        raise fail(
            f"module {module.__name__!r} defines neither create_client() nor a module-level client"
        )
    if not isinstance(made, AsyncClient):
        raise fail(
            f"module {module.__name__!r} must provide an awa.AsyncClient, got {type(made).__name__}"
        )
    return made


def _check_same_database(module: str, client: AsyncClient, target: str) -> None:
    """Refuse a module-level client built for another database than the command's
    target: the worker would announce one database and work on the other."""
    if _same_database(client.database_url, target):
        return
    raise fail(
        f"{module}.client connects to {redact_url(client.database_url)}, but this command's "
        f"target is {redact_url(target)} (from --database-url, --context, $DATABASE_URL or "
        f"the config file). A module-level client keeps the URL it was built with: define "
        f"create_client(database_url) in {module} to take the target, or make them agree"
    )


def _same_database(a: str, b: str) -> bool:
    try:
        return conninfo.parse(a) == conninfo.parse(b)
    except conninfo.ConnInfoError:
        return conninfo.normalize(a) == conninfo.normalize(b)


def start_options(module: ModuleType, queues: Sequence[tuple[str, int]]) -> dict[str, Any]:
    """Keyword arguments for ``client.start()``: the module's ``start_options`` with any
    ``--queue`` options replacing its queues."""
    raw = getattr(module, "start_options", None) or {}
    if not isinstance(raw, dict):
        raise fail(f"{module.__name__}.start_options must be a dict, got {type(raw).__name__}")
    options = dict(raw)
    if queues:
        options["queues"] = list(queues)
        options["only_listed_queues"] = True
    return options


def subset_warnings(handler_queues: Sequence[str], queues: Sequence[tuple[str, int]]) -> list[str]:
    """Warnings for a ``--queue`` subset: handler queues left unserved, and named queues
    no handler is registered for."""
    named = {name for name, _ in queues}
    warnings = []
    skipped = sorted(set(handler_queues) - named)
    if skipped:
        warnings.append(
            "handlers registered for queue(s) "
            + ", ".join(skipped)
            + " will not run in this worker (not named by --queue)"
        )
    unknown = sorted(named - set(handler_queues))
    if unknown:
        warnings.append(
            "no handler is registered for queue(s) "
            + ", ".join(unknown)
            + "; their jobs will fail as unknown kinds"
        )
    return warnings


async def serve(
    module: ModuleType,
    database_url: str | None,
    queues: Sequence[tuple[str, int]],
    shutdown_timeout_ms: int,
    health_addr: str | None = None,
    listen_url: str | None = None,
) -> None:
    """Run one runtime until SIGINT / SIGTERM, then shut it down gracefully."""
    import asyncio

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    received: list[int] = []

    def on_signal(signum: int) -> None:
        received.append(signum)
        if len(received) > 1:
            # A second signal means "now": skip the drain; heartbeat rescue recovers.
            os._exit(128 + signum)
        log.info(
            "pid %d received %s; shutting down (running handlers get %d ms)",
            os.getpid(),
            signal.Signals(signum).name,
            shutdown_timeout_ms,
        )
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal, signum)
    client = await load_client(module, database_url)
    if queues:
        for warning in subset_warnings(client.handler_queues(), queues):
            click.echo(f"awa worker: warning: {warning}", err=True)
    try:
        options = start_options(module, queues)
        if health_addr is not None:
            options["health_addr"] = health_addr
        if listen_url is not None:
            options["listen_database_url"] = listen_url
        # The runtime logs the start line (queues, capacity, kinds).
        await client.start(**options)
        await stop.wait()
        await client.shutdown(timeout_ms=shutdown_timeout_ms)
        log.info("pid %d stopped", os.getpid())
    finally:
        await client.close()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


def supervise(argv: list[str], processes: int, env: dict[str, str]) -> int:
    """Start ``processes`` copies of ``argv`` and wait for them; returns the exit code."""
    stopping = False
    children: list[subprocess.Popen[bytes]] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                # A repeated signal is forwarded too, which children treat as "exit now".
                child.send_signal(signal.SIGTERM)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for _ in range(processes):
            # Own session: a terminal's Ctrl-C reaches only the supervisor, which then
            # forwards exactly one SIGTERM, so children do not see it twice.
            children.append(subprocess.Popen(argv, env=env, start_new_session=True))
        log.info(
            "supervising %d processes (%s)", processes, ", ".join(str(c.pid) for c in children)
        )
        reported: set[int] = set()

        def report_failures() -> None:
            for child in children:
                code = child.poll()
                if code is not None and code != 0 and child.pid not in reported:
                    reported.add(child.pid)
                    log.error("process %d exited with status %d", child.pid, code)

        stop_deadline: float | None = None
        while any(c.poll() is None for c in children):
            report_failures()
            if reported and not stopping:
                log.warning("stopping the other processes")
                forward(signal.SIGTERM, None)
            if stopping and stop_deadline is None:
                stop_deadline = time.monotonic() + _STOP_GRACE
            if stop_deadline is not None and time.monotonic() > stop_deadline:
                for child in children:
                    if child.poll() is None:
                        child.kill()
            time.sleep(_SUPERVISE_TICK)
        codes = [c.wait() for c in children]
        report_failures()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
    return 1 if any(code != 0 for code in codes) else 0


@click.command()
@click.option(
    "--module",
    "-m",
    "module_name",
    required=True,
    metavar="MODULE",
    help="Module that registers handlers and exposes create_client() or client.",
)
@click.option(
    "--queue",
    "-q",
    "queue_specs",
    multiple=True,
    metavar="NAME[:N]",
    help="Serve this queue with N workers (default 10); repeatable.",
)
@click.option(
    "--processes",
    "-p",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    help="Worker processes to run (0 = one per CPU core).",
)
@click.option(
    "--shutdown-timeout-ms",
    type=click.IntRange(min=0),
    default=5000,
    show_default=True,
    help="How long running handlers may finish after SIGINT/SIGTERM.",
)
@click.option(
    "--health-addr",
    envvar=HEALTH_ADDR_ENV,
    metavar="HOST:PORT",
    default=None,
    help=f"Serve /healthz, /readyz and /metrics here (${HEALTH_ADDR_ENV}; port 0 = any free).",
)
@click.option(
    "--listen-database-url",
    "listen_url",
    envvar=LISTEN_URL_ENV,
    metavar="URL",
    default=None,
    help=(
        f"Listen for wake-ups here (${LISTEN_URL_ENV}): a direct or session-mode "
        "connection when the database URL goes through a transaction-mode pooler. "
        "Without one that works the workers poll."
    ),
)
@log_options("info")
def worker(
    module_name: str,
    queue_specs: tuple[str, ...],
    processes: int,
    shutdown_timeout_ms: int,
    health_addr: str | None,
    listen_url: str | None,
    log_level: str,
    log_format: str,
) -> None:
    """Run the handlers registered by MODULE until SIGINT or SIGTERM."""
    logs.configure(log_level, log_format)
    queues = [parse_queue(spec) for spec in queue_specs]
    health_addr = health_addr or None
    if health_addr is not None:
        try:
            _, port = parse_addr(health_addr)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--health-addr") from None
    url = state().optional_database_url(mutating=False)
    count = processes if processes > 0 else (os.cpu_count() or 1)
    if count > 1 and health_addr is not None and port != 0:
        raise click.UsageError(
            f"--health-addr {health_addr} cannot be shared by {count} processes: run one "
            "process per container (--processes 1), or use port 0"
        )
    if count > 1:
        argv = [sys.executable, "-m", "awa", "worker", "--module", module_name]
        for spec in queue_specs:
            argv += ["--queue", spec]
        argv += ["--processes", "1", "--shutdown-timeout-ms", str(shutdown_timeout_ms)]
        env = dict(os.environ)
        env[logs.LEVEL_ENV] = log_level
        env[logs.FORMAT_ENV] = log_format
        if health_addr is not None:
            env[HEALTH_ADDR_ENV] = health_addr
        else:
            env.pop(HEALTH_ADDR_ENV, None)
        if listen_url:
            env[LISTEN_URL_ENV] = listen_url
        if url is not None:
            # The resolved target, whatever selected it (children must not re-resolve a
            # context; the environment keeps the password out of the process list).
            env["DATABASE_URL"] = url
            env.pop("AWA_CONTEXT", None)
        # Children must import the module the same way the supervisor would.
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (os.getcwd(), env.get("PYTHONPATH", "")) if p
        )
        code = supervise(argv, count, env)
        if code != 0:
            raise click.exceptions.Exit(code)
        return
    import asyncio

    module = import_user_module(module_name)
    asyncio.run(serve(module, url, queues, shutdown_timeout_ms, health_addr, listen_url or None))
