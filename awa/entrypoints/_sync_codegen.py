"""Writes ``_client_sync_generated.py``: the blocking methods of ``Client`` and the
``*_sync`` methods of ``RawClient``, derived from ``AsyncClient``'s coroutine methods.

A keyword added to an ``AsyncClient`` method therefore reaches ``Client`` and
``RawClient`` by regenerating, never by a second hand edit::

    python -m awa.entrypoints._sync_codegen          # rewrite the module
    python -m awa.entrypoints._sync_codegen --check  # exit 1 if it is stale

``tests/unit/test_sync_client_generated.py`` runs the check. Nothing imports this module at
run time.
"""

from __future__ import annotations

import builtins
import inspect
import keyword
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

TARGET = Path(__file__).with_name("_client_sync_generated.py")

# Worker methods stay on AsyncClient; close and transaction are written by hand in
# client_sync.py (their sync form is not a plain blocking call); admin_engine,
# admin_control_plane, runtime_registry and schema_admin hand out async ports bound to the
# client's own event loop.
NOT_BLOCKING = frozenset(
    {
        "start",
        "shutdown",
        "close",
        "transaction",
        "admin_engine",
        "admin_control_plane",
        "runtime_registry",
        "schema_admin",
    }
)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _async_methods() -> list[tuple[str, Any]]:
    from awa.entrypoints.client_async import AsyncClient

    methods = []
    for name, fn in inspect.getmembers(AsyncClient, inspect.iscoroutinefunction):
        if name.startswith("_") or name in NOT_BLOCKING:
            continue
        methods.append((name, fn))
    return sorted(methods)


def _annotation(value: Any) -> str:
    if value is inspect.Parameter.empty:
        return ""
    return value if isinstance(value, str) else inspect.formatannotation(value)


def _names_used(text: str) -> set[str]:
    return {
        word
        for word in _IDENT.findall(text)
        if not keyword.iskeyword(word) and not hasattr(builtins, word) and word != "None"
    }


def _resolve(name: str, fn: Any) -> str:
    """The import line for ``name`` as seen from the module that defined ``fn``."""
    module = sys.modules[fn.__module__]
    obj = getattr(module, name, None)
    if obj is None:
        raise LookupError(f"{fn.__qualname__}: annotation name {name!r} is not importable")
    if name == "Any":
        return "from typing import Any"
    origin = getattr(obj, "__module__", None)
    if origin is None or getattr(sys.modules.get(origin), name, None) is not obj:
        # A type alias (``Literal[...]``) has no module of its own: take the awa module
        # that exports it, else the one that uses it.
        definers = sorted(
            mod_name
            for mod_name, mod in list(sys.modules.items())
            if mod_name.startswith("awa.")
            and getattr(mod, name, None) is obj
            and _assigns(mod, name)
        )
        origin = definers[0] if definers else fn.__module__
    return f"from {origin} import {name}"


def _assigns(module: Any, name: str) -> bool:
    """Whether ``module``'s own source binds ``name`` at top level (not an import)."""
    path = getattr(module, "__file__", None)
    if not path:
        return False
    text = Path(path).read_text(encoding="utf-8")
    return re.search(rf"^{re.escape(name)}\s*(:[^=]*)?=", text, re.MULTILINE) is not None


def _signature(fn: Any) -> tuple[str, str, set[str]]:
    """``(parameters, call arguments, names)`` of ``fn`` without ``self``."""
    sig = inspect.signature(fn)
    params: list[str] = []
    call: list[str] = []
    names: set[str] = set()
    star = False
    for param in list(sig.parameters.values())[1:]:
        if param.kind is param.VAR_POSITIONAL:
            raise TypeError(f"{fn.__qualname__}: *args cannot be forwarded by name")
        if param.kind is param.KEYWORD_ONLY and not star:
            params.append("*")
            star = True
        text = param.name
        annotation = _annotation(param.annotation)
        if annotation:
            text += f": {annotation}"
            names |= _names_used(annotation)
        if param.default is not param.empty:
            text += f" = {param.default!r}"
        if param.kind is param.VAR_KEYWORD:
            # ``**options: Unpack[SomeOptions]`` (the insert options, ADR 0027): forwarded
            # whole, so the twin takes exactly the keywords the TypedDict declares.
            params.append(f"**{text}")
            call.append(f"**{param.name}")
            continue
        params.append(text)
        call.append(
            param.name if param.kind is not param.KEYWORD_ONLY else f"{param.name}={param.name}"
        )
    result = _annotation(sig.return_annotation) or "None"
    names |= _names_used(result)
    return ", ".join(["self", *params]), ", ".join(call), names | {"__return__:" + result}


def _summary(fn: Any) -> str:
    doc = inspect.getdoc(fn) or ""
    first = doc.split("\n\n", 1)[0].replace("\n", " ").strip()
    return first.replace('"""', "'''")


def _docstring(text: str) -> list[str]:
    lines = textwrap.wrap(text, width=84)
    if len(lines) == 1 and len(lines[0]) <= 82:
        return [f'        """{lines[0]}"""']
    return ['        """' + lines[0], *(f"        {line}" for line in lines[1:]), '        """']


def _unpacked(fn: Any) -> str | None:
    """The TypedDict of ``fn``'s ``**options: Unpack[X]`` parameter (``X``), if it has one."""
    for param in inspect.signature(fn).parameters.values():
        if param.kind is param.VAR_KEYWORD:
            match = re.fullmatch(r"Unpack\[(\w+)\]", _annotation(param.annotation))
            if match is None:
                raise TypeError(f"{fn.__qualname__}: **{param.name} must be Unpack[SomeOptions]")
            return match.group(1)
    return None


def _keyword_check(name: str, options: str | None) -> list[str]:
    """A keyword ``options`` does not declare is refused by the blocking method itself, so
    the error names it (``Client.insert() got an unexpected keyword argument 'x'``), as
    awa-pg's does."""
    if options is None:
        return []
    return [f'        check_keywords(f"{{type(self).__name__}}.{name}", options, {options})']


def render() -> str:
    """The module's source, formatted as ``ruff format`` would."""
    client_lines: list[str] = []
    raw_lines: list[str] = []
    imports = {"from typing import Any"}
    for name, fn in _async_methods():
        params, call, names = _signature(fn)
        result = next(n for n in names if n.startswith("__return__:")).split(":", 1)[1]
        for used in sorted(n for n in names if not n.startswith("__return__:")):
            imports.add(_resolve(used, fn))
        summary = _summary(fn)
        options = _unpacked(fn)
        if options is not None:
            imports.add("from awa.domain.keywords import check_keywords")
        client_lines += [
            f"    def {name}({params}) -> {result}:",
            *_docstring(f"{summary} Blocking form of ``AsyncClient.{name}``."),
            *_keyword_check(name, options),
            f"        return self._run(self._async.{name}({call}))",
            "",
        ]
        raw_lines += [
            f"    def {name}_sync({params}) -> {result}:",
            *_docstring(f"Blocking ``{name}``, on a client of its own (see ``Client.{name}``)."),
            *_keyword_check(f"{name}_sync", options),
            f"        return self._blocking().{name}({call})",
            "",
        ]
    header = [
        '"""Generated by ``python -m awa.entrypoints._sync_codegen`` from ``AsyncClient``:',
        "do not edit by hand. Regenerate after changing an ``AsyncClient`` coroutine method.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        *sorted(imports),
        "from awa.entrypoints.client_sync import BlockingClientBase, RawClientBase",
        "",
        "",
        "class Client(BlockingClientBase):",
        '    """Blocking client for producers and operators (``with Client(url) as client``).',
        "",
        "    Every method blocks until its ``AsyncClient`` counterpart is done. Worker methods",
        "    (``task``, ``start``, ``shutdown``) live on :class:`AsyncClient` only.",
        '    """',
        "",
    ]
    raw_header = [
        "",
        "class RawClient(RawClientBase):",
        '    """The client every other client is built on, as awa-pg\'s ``RawClient``: each',
        "    ``AsyncClient`` coroutine method, plus a blocking ``<name>_sync`` twin.",
        '    """',
        "",
    ]
    source = "\n".join([*header, *client_lines, *raw_header, *raw_lines]) + "\n"
    return _ruff_format(source)


def _ruff_format(source: str) -> str:
    """Sort the imports and format, as the project's ``ruff`` settings ask."""
    ruff = Path(sys.executable).with_name("ruff")
    command = [str(ruff)] if ruff.exists() else [sys.executable, "-m", "ruff"]
    for step in (["check", "--select", "I", "--fix", "--quiet"], ["format"]):
        source = subprocess.run(
            [*command, *step, "--stdin-filename", str(TARGET), "-"],
            input=source,
            capture_output=True,
            text=True,
            check=True,
            cwd=TARGET.parents[2],
        ).stdout
    return source


def main(argv: list[str]) -> int:
    source = render()
    if "--check" in argv:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != source:
            print(
                f"{TARGET} is stale: run python -m awa.entrypoints._sync_codegen", file=sys.stderr
            )
            return 1
        return 0
    TARGET.write_text(source, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
