"""Named contexts: the databases an operator works with, in one TOML file.

The file is ``$AWA_CONFIG`` when set, else ``$XDG_CONFIG_HOME/awa/config.toml``, else
``~/.config/awa/config.toml``::

    default_context = "local"

    [contexts.local]
    url = "postgresql://localhost/app_dev"

    [contexts.prod]
    url_env = "PROD_DATABASE_URL"   # read from the environment when used
    production = true               # mutations ask for confirmation

Each context has exactly one of ``url`` / ``url_env`` and an optional ``production``
flag (default ``false``) and ``description``. A plaintext password in a file that the
group or others can read draws a warning (keep the file ``chmod 600``, or use
``url_env``). A missing file means no contexts.
"""

from __future__ import annotations

import stat
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from awa.adapters._pg import conninfo

_CONTEXT_KEYS = frozenset({"url", "url_env", "production", "description"})
_TOP_KEYS = frozenset({"default_context", "contexts"})


class ConfigError(Exception):
    """The contexts file is unreadable or invalid; the message names the file and field."""


@attrs.frozen
class NamedContext:
    """One ``[contexts.NAME]`` table."""

    name: str
    url: str | None = None
    url_env: str | None = None
    production: bool = False
    description: str | None = None

    def resolve(self, environ: Mapping[str, str]) -> str:
        """The connection string of this context (``url_env`` read from ``environ``)."""
        if self.url is not None:
            return self.url
        assert self.url_env is not None
        value = environ.get(self.url_env, "").strip()
        if not value:
            raise ConfigError(
                f"context {self.name!r} reads its URL from ${self.url_env}, which is not set"
            )
        return value

    def source(self) -> str:
        """Where the URL comes from: ``url`` or ``$VAR``."""
        return "url" if self.url is not None else f"${self.url_env}"


@attrs.frozen
class ContextConfig:
    """The parsed contexts file (empty when the file does not exist)."""

    path: Path
    contexts: dict[str, NamedContext] = attrs.field(factory=dict)
    default_context: str | None = None
    exists: bool = False
    warnings: tuple[str, ...] = ()

    def get(self, name: str) -> NamedContext:
        """The context called ``name``; :class:`ConfigError` listing the known ones if none."""
        found = self.contexts.get(name)
        if found is None:
            known = ", ".join(sorted(self.contexts)) or "none defined"
            raise ConfigError(f"no context named {name!r} in {self.path} (known: {known})")
        return found


def config_path(environ: Mapping[str, str]) -> Path:
    """The contexts file: ``$AWA_CONFIG``, ``$XDG_CONFIG_HOME/awa/config.toml`` or
    ``~/.config/awa/config.toml``."""
    explicit = environ.get("AWA_CONFIG", "").strip()
    if explicit:
        return Path(explicit).expanduser()
    xdg = environ.get("XDG_CONFIG_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".config"
    return base / "awa" / "config.toml"


def load(environ: Mapping[str, str]) -> ContextConfig:
    """Read and validate the contexts file (an absent file gives an empty config)."""
    path = config_path(environ)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        if environ.get("AWA_CONFIG", "").strip():
            raise ConfigError(f"$AWA_CONFIG names {path}, which does not exist") from None
        return ContextConfig(path=path)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        # The parser's message names a line and column, never a value.
        raise ConfigError(f"{path} is not valid TOML: {exc}") from None
    return _parse(path, data)


def _parse(path: Path, data: dict[str, Any]) -> ContextConfig:
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise ConfigError(f"{path}: unknown top-level key(s) {', '.join(unknown)}")
    tables = data.get("contexts", {})
    if not isinstance(tables, dict):
        raise ConfigError(f"{path}: 'contexts' must be a table of [contexts.NAME] tables")
    contexts = {name: _context(path, name, table) for name, table in tables.items()}
    default = data.get("default_context")
    if default is not None:
        if not isinstance(default, str):
            raise ConfigError(f"{path}: default_context must be a string")
        if default not in contexts:
            known = ", ".join(sorted(contexts)) or "none defined"
            raise ConfigError(
                f"{path}: default_context {default!r} is not a defined context (known: {known})"
            )
    return ContextConfig(
        path=path,
        contexts=contexts,
        default_context=default,
        exists=True,
        warnings=tuple(_password_warnings(path, contexts)),
    )


def _context(path: Path, name: str, table: Any) -> NamedContext:
    where = f"{path}: [contexts.{name}]"
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    unknown = sorted(set(table) - _CONTEXT_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)}")
    url, url_env = table.get("url"), table.get("url_env")
    if (url is None) == (url_env is None):
        raise ConfigError(f"{where} needs exactly one of url or url_env")
    for key, value in (("url", url), ("url_env", url_env)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ConfigError(f"{where}: {key} must be a non-empty string")
    production = table.get("production", False)
    if not isinstance(production, bool):
        raise ConfigError(f"{where}: production must be true or false")
    description = table.get("description")
    if description is not None and not isinstance(description, str):
        raise ConfigError(f"{where}: description must be a string")
    if url is not None:
        try:
            conninfo.parse(url)
        except conninfo.ConnInfoError as exc:
            raise ConfigError(f"{where}: url: {exc}") from None
    return NamedContext(
        name=name, url=url, url_env=url_env, production=production, description=description
    )


def _password_warnings(path: Path, contexts: Mapping[str, NamedContext]) -> list[str]:
    try:
        mode = path.stat().st_mode
    except OSError:
        return []
    if not mode & (stat.S_IRWXG | stat.S_IRWXO):
        return []
    holders = sorted(n for n, c in contexts.items() if c.url and conninfo.has_password(c.url))
    if not holders:
        return []
    readers = "group and others" if mode & stat.S_IRWXO else "its group"
    return [
        f"{path} holds a plaintext password (context {', '.join(holders)}) and is readable "
        f"by {readers} (mode {stat.S_IMODE(mode):o}): run `chmod 600 {path}` or use url_env"
    ]
