"""``python -m awa``: the command line when it is installed, otherwise the demo."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable


def entry_point() -> Callable[[], object]:
    """``awa.entrypoints.cli.main`` if that module exists, else the in-memory demo."""
    cli = "awa.entrypoints.cli"
    name = cli if importlib.util.find_spec(cli) is not None else "awa.entrypoints.demo"
    main: Callable[[], object] = importlib.import_module(name).main
    return main


if __name__ == "__main__":
    raise SystemExit(entry_point()())
