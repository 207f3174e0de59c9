"""``awa serve`` (admin UI + REST API) and ``awa callbacks serve`` (callback receiver).

Both need the ``ui`` extra (``pip install 'awa-py[ui]'``): Starlette, Jinja2, uvicorn.
Every option has an ``AWA_*`` environment variable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from awa.callback_contract import DEFAULT_PATH_PREFIX, DEFAULT_REPLAY_WINDOW_SECS
from awa.domain.errors import ValidationError
from awa.entrypoints.cli._common import CliState, CommandFailed
from awa.entrypoints.web.limits import DEFAULT_MAX_BODY_BYTES, DEFAULT_SESSION_TTL

#: The extras ``awa serve`` and ``awa callbacks serve`` need: the web stack, and CEL for
#: callback expressions (an image that runs them installs these; deploy/docker/Dockerfile).
SERVE_EXTRAS = ("ui", "cel")
UI_EXTRA = "this command needs the ui extra: pip install 'awa-py[ui]'"
F = Callable[..., Any]


def _pool_options(command: F) -> F:
    options = [
        click.option(
            "--pool-max",
            type=click.IntRange(min=1),
            default=10,
            show_default=True,
            envvar="AWA_POOL_MAX",
            help="Most database connections. [env AWA_POOL_MAX]",
        ),
        click.option(
            "--pool-min",
            type=click.IntRange(min=0),
            default=2,
            show_default=True,
            envvar="AWA_POOL_MIN",
            help="Connections kept open. [env AWA_POOL_MIN]",
        ),
        click.option(
            "--pool-idle-timeout",
            type=click.FloatRange(min=1),
            default=300.0,
            show_default=True,
            envvar="AWA_POOL_IDLE_TIMEOUT",
            help="Seconds before an idle connection closes. [env AWA_POOL_IDLE_TIMEOUT]",
        ),
        click.option(
            "--pool-max-lifetime",
            type=click.FloatRange(min=1),
            default=1800.0,
            show_default=True,
            envvar="AWA_POOL_MAX_LIFETIME",
            help="Seconds before a connection is replaced. [env AWA_POOL_MAX_LIFETIME]",
        ),
        click.option(
            "--pool-acquire-timeout",
            type=click.FloatRange(min=0.1),
            default=10.0,
            show_default=True,
            envvar="AWA_POOL_ACQUIRE_TIMEOUT",
            help="Seconds to wait for a free connection. [env AWA_POOL_ACQUIRE_TIMEOUT]",
        ),
        click.option(
            "--callback-hmac-secret",
            envvar="AWA_CALLBACK_HMAC_SECRET",
            metavar="HEX",
            help="32-byte callback signing secret as 64 hex characters; requests "
            "then need X-Awa-Signature. [env AWA_CALLBACK_HMAC_SECRET]",
        ),
        click.option(
            "--callback-require-request-signature",
            is_flag=True,
            envvar="AWA_CALLBACK_REQUIRE_REQUEST_SIGNATURE",
            help="Refuse callbacks signed over the id alone: each needs X-Awa-Timestamp and "
            "X-Awa-Request-Signature over the body. [env AWA_CALLBACK_REQUIRE_REQUEST_SIGNATURE]",
        ),
        click.option(
            "--callback-replay-window",
            type=click.FloatRange(min=1),
            default=DEFAULT_REPLAY_WINDOW_SECS,
            show_default=True,
            envvar="AWA_CALLBACK_REPLAY_WINDOW",
            help="Seconds a request signature's timestamp may differ from this clock. "
            "[env AWA_CALLBACK_REPLAY_WINDOW]",
        ),
        click.option(
            "--max-body-bytes",
            type=click.IntRange(min=1),
            default=DEFAULT_MAX_BODY_BYTES,
            show_default=True,
            envvar="AWA_MAX_BODY_BYTES",
            help="Largest request body; larger ones get 413. [env AWA_MAX_BODY_BYTES]",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def _pool(kw: dict[str, Any]) -> Any:
    from awa.adapters._pg.pool import PoolOptions

    return PoolOptions(
        min_connections=kw["pool_min"],
        max_idle=kw["pool_idle_timeout"],
        max_lifetime=kw["pool_max_lifetime"],
        acquire_timeout=kw["pool_acquire_timeout"],
    )


def _callback_settings(kw: dict[str, Any]) -> dict[str, Any]:
    if kw["callback_require_request_signature"] and not kw["callback_hmac_secret"]:
        raise click.UsageError(
            "--callback-require-request-signature needs --callback-hmac-secret "
            "(AWA_CALLBACK_HMAC_SECRET)"
        )
    return {
        "callback_require_request_signature": kw["callback_require_request_signature"],
        "callback_replay_window": kw["callback_replay_window"],
    }


def _run(app: Any, host: str, port: int) -> None:
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, lifespan="on", log_level="info")
    server = uvicorn.Server(config)
    server.run()
    if not server.started:
        raise CommandFailed("the server did not start (see the log above)")


def _ui_available() -> None:
    try:
        import jinja2  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise CommandFailed(f"{UI_EXTRA} ({exc.name} is missing)") from None


@click.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    envvar="AWA_HOST",
    help="Address to bind. [env AWA_HOST]",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=3000,
    show_default=True,
    envvar="AWA_PORT",
    help="Port to bind. [env AWA_PORT]",
)
@_pool_options
@click.option(
    "--cache-ttl",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    envvar="AWA_CACHE_TTL",
    help="Seconds polled reads are cached. [env AWA_CACHE_TTL]",
)
@click.option(
    "--read-only",
    is_flag=True,
    envvar="AWA_READ_ONLY",
    help="Refuse every mutation (503) and hide mutation buttons. [env AWA_READ_ONLY]",
)
@click.option(
    "--instance-name",
    envvar="AWA_INSTANCE_NAME",
    help="Name shown in the header. [env AWA_INSTANCE_NAME]",
)
@click.option(
    "--instance-color",
    envvar="AWA_INSTANCE_COLOR",
    metavar="#RRGGBB",
    help="Header accent colour. [env AWA_INSTANCE_COLOR]",
)
@click.option(
    "--peer",
    "peers",
    multiple=True,
    envvar="AWA_PEERS",
    metavar="NAME=URL",
    help="Link to another awa serve (repeatable; env: space-separated). [env AWA_PEERS]",
)
@click.option(
    "--auth-token",
    envvar="AWA_UI_TOKEN",
    help="Require this token: bearer for the API, a login for the pages. [env AWA_UI_TOKEN]",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    envvar="AWA_ALLOWED_HOSTS",
    metavar="NAME",
    help="Also serve requests whose Host header is NAME (repeatable; env: space- or "
    "comma-separated; '*' for any). Without --auth-token only loopback hosts are "
    "served otherwise (DNS rebinding). [env AWA_ALLOWED_HOSTS]",
)
@click.option(
    "--session-ttl",
    type=click.FloatRange(min=60),
    default=DEFAULT_SESSION_TTL,
    show_default=True,
    envvar="AWA_UI_SESSION_TTL",
    help="Seconds a page login lasts. [env AWA_UI_SESSION_TTL]",
)
@click.pass_obj
def serve(state: CliState, /, **kw: Any) -> None:
    """Run the admin web UI and REST API (default http://127.0.0.1:3000)."""
    _ui_available()
    from awa.entrypoints.web.app import create_app
    from awa.entrypoints.web.config import (
        ServerConfig,
        is_loopback,
        parse_color,
        parse_peer,
        parse_secret,
    )
    from awa.entrypoints.web.guard import parse_allowed_hosts

    try:
        config = ServerConfig(
            database_url=state.database_url(),
            host=kw["host"],
            port=kw["port"],
            pool_max=kw["pool_max"],
            pool=_pool(kw),
            cache_ttl=kw["cache_ttl"],
            read_only=kw["read_only"],
            callback_secret=parse_secret(kw["callback_hmac_secret"]),
            instance_name=kw["instance_name"] or None,
            instance_color=parse_color(kw["instance_color"]),
            peers=tuple(parse_peer(p) for p in kw["peers"]),
            auth_token=kw["auth_token"] or None,
            allowed_hosts=parse_allowed_hosts(kw["allowed_hosts"]),
            session_ttl=kw["session_ttl"],
            max_body_bytes=kw["max_body_bytes"],
            **_callback_settings(kw),
        )
    except (ValidationError, ValueError) as exc:
        raise click.BadParameter(str(exc)) from None
    if config.auth_token is None and not is_loopback(config.host):
        click.echo(
            f"awa: warning: serving on {config.host} without --auth-token (AWA_UI_TOKEN): "
            "anyone who can reach this port can retry, cancel, drain and purge jobs; "
            "requests are answered only for loopback Host names and --allowed-host",
            err=True,
        )
    if config.auth_token is None and "*" in config.allowed_hosts:
        click.echo(
            "awa: warning: --allowed-host '*' without --auth-token: any Host is answered, "
            "so a DNS-rebinding web page can drive this server from a browser",
            err=True,
        )
    if config.auth_token is not None and config.callback_secret is None:
        click.echo(
            "awa: warning: --auth-token without --callback-hmac-secret: the callback routes "
            "want the bearer token too; give external systems signed callbacks by setting "
            "--callback-hmac-secret (AWA_CALLBACK_HMAC_SECRET)",
            err=True,
        )
    _run(create_app(config), config.host, config.port)


@click.group()
def callbacks() -> None:
    """External-callback receiver."""


@callbacks.command("serve")
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    envvar="AWA_CALLBACK_HOST",
    help="Address to bind. [env AWA_CALLBACK_HOST]",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=4000,
    show_default=True,
    envvar="AWA_CALLBACK_PORT",
    help="Port to bind. [env AWA_CALLBACK_PORT]",
)
@_pool_options
@click.option(
    "--path-prefix",
    default=DEFAULT_PATH_PREFIX,
    show_default=True,
    envvar="AWA_CALLBACK_PATH_PREFIX",
    help="URL prefix of the routes. [env AWA_CALLBACK_PATH_PREFIX]",
)
@click.option(
    "--allow-unsigned",
    is_flag=True,
    envvar="AWA_CALLBACK_ALLOW_UNSIGNED",
    help="Accept requests without a signature (no secret). [env AWA_CALLBACK_ALLOW_UNSIGNED]",
)
@click.pass_obj
def callbacks_serve(state: CliState, /, **kw: Any) -> None:
    """Serve only POST {prefix}/{id}/complete|fail|heartbeat: no UI, no CORS."""
    _ui_available()
    from awa.entrypoints.web.app import create_callback_app
    from awa.entrypoints.web.config import ServerConfig, parse_prefix, parse_secret

    try:
        secret = parse_secret(kw["callback_hmac_secret"])
        prefix = parse_prefix(kw["path_prefix"])
    except ValidationError as exc:
        raise click.BadParameter(str(exc)) from None
    if secret is not None and kw["allow_unsigned"]:
        raise click.UsageError("--callback-hmac-secret and --allow-unsigned are mutually exclusive")
    if secret is None and not kw["allow_unsigned"]:
        raise click.UsageError(
            "refusing to accept unsigned callbacks: set --callback-hmac-secret "
            "(AWA_CALLBACK_HMAC_SECRET) or pass --allow-unsigned"
        )
    settings = _callback_settings(kw)
    import asyncio

    from awa.entrypoints import bootstrap

    url = state.database_url()
    access = asyncio.run(bootstrap.probe_write_access(url))
    if not access.writable:
        raise CommandFailed(f"the callback receiver needs a writable database: {access.reason}")
    config = ServerConfig(
        database_url=url,
        host=kw["host"],
        port=kw["port"],
        pool_max=kw["pool_max"],
        pool=_pool(kw),
        callback_secret=secret,
        callback_prefix=prefix,
        max_body_bytes=kw["max_body_bytes"],
        **settings,
    )
    _run(create_callback_app(config), config.host, config.port)
