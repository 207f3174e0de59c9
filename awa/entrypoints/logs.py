"""Log output for the command line: the only place Awa installs logging handlers.

``text`` is one readable line per record (tracebacks follow on the next lines); ``json``
is one JSON object per line with ``time``, ``level``, ``logger`` and ``message``, every
job field the record carries (``job_id``, ``kind``, ``queue``, ``attempt``,
``max_attempts``, ``duration_ms``, ``outcome``, ``error``) and, for an exception,
``python.exception_type``, ``exception.message`` and ``exception.stacktrace``.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from datetime import UTC, datetime
from typing import Any, TextIO

from awa.runtime.outcome_log import JOB_FIELDS

LEVELS = ("debug", "info", "warning", "error", "critical")
FORMATS = ("text", "json")
LEVEL_ENV = "AWA_LOG_LEVEL"
FORMAT_ENV = "AWA_LOG_FORMAT"
_HANDLER_NAME = "awa-cli"


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for field in JOB_FIELDS:
            value = record.__dict__.get(field)
            if value is not None:
                entry[field] = value
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            entry["python.exception_type"] = type(exc).__name__
            entry["exception.type"] = f"{type(exc).__module__}.{type(exc).__qualname__}"
            entry["exception.message"] = str(exc)
            entry["exception.stacktrace"] = "".join(traceback.format_exception(exc)).rstrip()
        return json.dumps(entry, default=str)


def configure(level: str = "info", fmt: str = "text", stream: TextIO | None = None) -> None:
    """Send the ``awa`` logger tree (and warnings from the user's code, via the root
    logger) to ``stream`` (stderr) at ``level`` in ``fmt``. Calling it again replaces
    the handler it installed."""
    if level.lower() not in LEVELS:
        raise ValueError(f"log level must be one of {', '.join(LEVELS)}, got {level!r}")
    if fmt.lower() not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.set_name(_HANDLER_NAME)
    if fmt.lower() == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    for existing in list(root.handlers):
        if existing.get_name() == _HANDLER_NAME:
            root.removeHandler(existing)
    root.addHandler(handler)
    numeric = getattr(logging, level.upper())
    # The awa tree follows the level; other libraries' chatter stays at WARNING or above.
    root.setLevel(max(numeric, logging.WARNING))
    logging.getLogger("awa").setLevel(numeric)
    logging.captureWarnings(True)
