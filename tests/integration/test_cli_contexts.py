"""Named contexts: the config file, target resolution, the explicit-target rule for
mutating commands, the production gate, the target echo and ``awa context list|show``."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import click
import psycopg
import pytest
from click.testing import CliRunner, Result

import awa
from awa.entrypoints.cli import cli
from awa.entrypoints.cli._common import is_mutating
from awa.entrypoints.cli._contexts import ConfigError, config_path, load
from awa.entrypoints.cli._target import resolve
from tests.support.pg import DatabaseFactory

UNREACHABLE = "postgresql://app:Unreach4ble@127.0.0.1:1/nowhere"

#: Arguments that get every data-changing command past its own validation to the point
#: where it needs the database; a new mutating command must be added here.
MUTATING_ARGS: dict[str, list[str]] = {
    "adopt": [],
    "dev": ["--jobs", "1"],
    "dlq move": ["1"],
    "dlq purge": ["1"],
    "dlq retry": ["1"],
    "dlq retry-all": ["--all"],
    "dlq retry-bulk": ["--all"],
    "job cancel": ["1"],
    "job discard": ["--kind", "k"],
    "job enqueue": ["k", "--args", "{}"],
    "job insert": ["k", "--args", "{}"],
    "job retry": ["1"],
    "job retry-failed": ["--kind", "k"],
    "migrate": [],
    "queue drain": ["q"],
    "queue pause": ["q"],
    "queue resume": ["q"],
    "storage abort": [],
    "storage enter-mixed-transition": [],
    "storage finalize": [],
    "storage prepare": ["--engine", "queue_storage"],
    "storage rebuild-terminal-counters": [],
    "storage prepare-queue-storage-schema": ["--schema", "awa_x"],
}


def mutating_commands() -> list[str]:
    found: list[str] = []

    def walk(command: object, path: list[str]) -> None:
        assert isinstance(command, click.Command)
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk(sub, [*path, name])
        if is_mutating(command):
            found.append(" ".join(path))

    walk(cli, [])
    return sorted(found)


def write_config(path: Path, text: str, mode: int = 0o600) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def two_contexts(tmp_path: Path, local_url: str, prod_url: str) -> Path:
    return write_config(
        tmp_path / "awa.toml",
        f"""
default_context = "local"

[contexts.local]
url = "{local_url}"

[contexts.prod]
url_env = "AWA_TEST_PROD_URL"
production = true
description = "the live cluster"
""",
    )


def invoke(*args: str, env: Mapping[str, str | None] | None = None, input: str = "") -> Result:
    base: dict[str, str | None] = {"DATABASE_URL": None, "AWA_CONTEXT": None}
    return CliRunner().invoke(cli, list(args), env={**base, **(env or {})}, input=input)


# ----------------------------------------------------------------------------- config file


def test_config_path_prefers_awa_config_then_xdg_then_home(tmp_path: Path) -> None:
    assert config_path({"AWA_CONFIG": str(tmp_path / "a.toml")}) == tmp_path / "a.toml"
    assert config_path({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "awa" / "config.toml"
    assert config_path({}) == Path.home() / ".config" / "awa" / "config.toml"


def test_a_missing_file_means_no_contexts_but_a_missing_awa_config_is_an_error(
    tmp_path: Path,
) -> None:
    assert load({"XDG_CONFIG_HOME": str(tmp_path)}).contexts == {}
    with pytest.raises(ConfigError, match=r"\$AWA_CONFIG names"):
        load({"AWA_CONFIG": str(tmp_path / "nope.toml")})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[contexts.a]\nurl = "postgresql://h/db"\nurl_env = "X"\n', "exactly one of url"),
        ("[contexts.a]\nproduction = true\n", "exactly one of url"),
        ('[contexts.a]\nurl = "postgresql://h/db"\nproduction = "yes"\n', "true or false"),
        ('[contexts.a]\nurl = "postgresql://h/db"\nhost = "x"\n', "unknown key(s) host"),
        ('default_context = "b"\n[contexts.a]\nurl = "postgresql://h/db"\n', "'b' is not"),
        ("colour = 1\n", "unknown top-level key(s) colour"),
        ("[contexts.a\n", "not valid TOML"),
    ],
)
def test_invalid_config_names_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = write_config(tmp_path / "c.toml", text)
    with pytest.raises(ConfigError) as raised:
        load({"AWA_CONFIG": str(path)})
    assert message in str(raised.value)
    assert str(path) in str(raised.value)


def test_an_unparseable_url_is_refused_without_quoting_it(tmp_path: Path) -> None:
    path = write_config(tmp_path / "c.toml", '[contexts.a]\nurl = "host=h password=\'S3cr3t"\n')
    with pytest.raises(ConfigError) as raised:
        load({"AWA_CONFIG": str(path)})
    assert "could not be parsed" in str(raised.value)
    assert "S3cr3t" not in str(raised.value)


def test_a_readable_file_with_a_plaintext_password_draws_a_warning(tmp_path: Path) -> None:
    text = '[contexts.a]\nurl = "postgresql://app:S3cr3t@h/db"\n'
    path = write_config(tmp_path / "c.toml", text, mode=0o644)
    (warning,) = load({"AWA_CONFIG": str(path)}).warnings
    assert "plaintext password" in warning and "chmod 600" in warning
    assert "S3cr3t" not in warning
    path.chmod(0o600)
    assert load({"AWA_CONFIG": str(path)}).warnings == ()
    env_only = write_config(tmp_path / "e.toml", '[contexts.a]\nurl_env = "X"\n', mode=0o644)
    assert load({"AWA_CONFIG": str(env_only)}).warnings == ()
    kv = write_config(tmp_path / "k.toml", "[contexts.a]\nurl = \"host=h password='p w'\"\n", 0o640)
    assert "readable by its group" in load({"AWA_CONFIG": str(kv)}).warnings[0]


# ----------------------------------------------------------------------------- resolution


def test_resolution_order(tmp_path: Path) -> None:
    path = two_contexts(tmp_path, "postgresql://h/local", "unused")
    env = {"AWA_CONFIG": str(path), "AWA_TEST_PROD_URL": "postgresql://h/prod"}

    def target(database_url: str | None = None, context: str | None = None, **extra: str) -> str:
        found, _ = resolve(database_url=database_url, context_name=context, environ=env | extra)
        assert found is not None
        return f"{found.via}|{found.url}|{found.explicit}"

    assert target() == "default_context local|postgresql://h/local|False"
    assert target(DATABASE_URL="postgresql://h/env") == "DATABASE_URL|postgresql://h/env|False"
    assert target(AWA_CONTEXT="prod", DATABASE_URL="postgresql://h/env") == (
        "AWA_CONTEXT=prod|postgresql://h/prod|True"
    )
    assert (
        target(context="local", AWA_CONTEXT="prod") == "--context local|postgresql://h/local|True"
    )
    assert target("postgresql+psycopg://h/x", "prod") == "--database-url|postgresql://h/x|True"


def test_an_explicit_url_survives_a_broken_config_file(tmp_path: Path) -> None:
    broken = write_config(tmp_path / "c.toml", "[contexts.a\n")
    found, _ = resolve(
        database_url="postgresql://h/x", context_name=None, environ={"AWA_CONFIG": str(broken)}
    )
    assert found is not None and found.url == "postgresql://h/x"
    result = invoke("job", "list", env={"AWA_CONFIG": str(broken)})
    assert result.exit_code == 2
    assert "not valid TOML" in result.stderr


def test_unknown_context_and_unset_url_env_are_usage_errors(tmp_path: Path) -> None:
    path = two_contexts(tmp_path, "postgresql://h/local", "unused")
    unknown = invoke("--context", "staging", "job", "list", env={"AWA_CONFIG": str(path)})
    assert unknown.exit_code == 2
    assert "no context named 'staging'" in unknown.stderr and "local, prod" in unknown.stderr
    unset = invoke("job", "list", "--context", "prod", env={"AWA_CONFIG": str(path)})
    assert unset.exit_code == 2
    assert "$AWA_TEST_PROD_URL, which is not set" in unset.stderr


# ----------------------------------------------------------------------------- rules


def test_every_mutating_command_has_gate_arguments() -> None:
    assert mutating_commands() == sorted(MUTATING_ARGS)


@pytest.mark.parametrize("command", sorted(MUTATING_ARGS))
def test_production_gate_refuses_a_non_interactive_stdin(command: str, tmp_path: Path) -> None:
    # The production target is unreachable: a command that got past the gate would fail
    # to connect instead, so the refusal proves nothing was attempted.
    path = two_contexts(tmp_path, UNREACHABLE, "unused")
    env = {"AWA_CONFIG": str(path), "AWA_TEST_PROD_URL": UNREACHABLE}
    args = [*command.split(), *MUTATING_ARGS[command]]
    result = invoke("--context", "prod", *args, env=env)
    assert result.exit_code == 1, result.output
    assert f"refusing `cli {command}` on production context 'prod'" in result.stderr
    assert "pass --yes" in result.stderr
    assert "Unreach4ble" not in result.output
    assert "could not connect" not in result.stderr


@pytest.mark.parametrize("command", sorted(MUTATING_ARGS))
def test_mutating_commands_refuse_a_fallback_target_with_several_contexts(
    command: str, tmp_path: Path
) -> None:
    path = two_contexts(tmp_path, UNREACHABLE, UNREACHABLE)
    args = [*command.split(), *MUTATING_ARGS[command]]
    for env in ({"AWA_CONFIG": str(path)}, {"AWA_CONFIG": str(path), "DATABASE_URL": UNREACHABLE}):
        result = invoke(*args, env=env)
        assert result.exit_code == 2, result.output
        assert "defines 2 contexts (local, prod)" in result.stderr
        assert "--context NAME" in result.stderr
        assert "could not connect" not in result.stderr


@pytest.fixture
def two_databases(pg_databases: DatabaseFactory, migrated_database_url: str) -> Iterator[str]:
    """A second migrated database (the first is ``migrated_database_url``)."""
    from tests.conftest import migrate_template

    url = pg_databases.create(pg_databases.template("migrated", migrate_template))
    try:
        yield url
    finally:
        pg_databases.release(url)


def paused(url: str, queue: str) -> bool:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT paused FROM awa.queue_meta WHERE queue = %s", (queue,)
        ).fetchone()
    return bool(row and row[0])


def test_two_contexts_read_and_write_with_and_without_yes(
    tmp_path: Path, migrated_database_url: str, two_databases: str
) -> None:
    local, prod = migrated_database_url, two_databases
    path = two_contexts(tmp_path, local, "unused")
    env = {"AWA_CONFIG": str(path), "AWA_TEST_PROD_URL": prod}

    # Reads fall back to default_context and go to the production context freely.
    read = invoke("queue", "stats", env=env)
    assert read.exit_code == 0, read.output
    assert "(context local, via default_context)" in read.stderr
    read_prod = invoke("queue", "stats", "--context", "prod", env=env)
    assert read_prod.exit_code == 0
    assert "(context prod, production)" in read_prod.stderr

    # Writes: the fallback is refused, the explicit local context is not gated.
    assert invoke("queue", "pause", "q1", env=env).exit_code == 2
    assert invoke("--context", "local", "queue", "pause", "q1", env=env).exit_code == 0
    assert paused(local, "q1")

    # Production without --yes on a pipe: refused, nothing changed.
    refused = invoke("queue", "pause", "q2", "--context", "prod", env=env, input="y\n")
    assert refused.exit_code == 1
    assert not paused(prod, "q2")

    # With --yes (before or after the subcommand; AWA_CONTEXT selects too).
    confirmed = invoke("queue", "pause", "q2", "--yes", env={**env, "AWA_CONTEXT": "prod"})
    assert confirmed.exit_code == 0, confirmed.output
    assert paused(prod, "q2")
    assert not paused(local, "q2")
    early = invoke("--yes", "--context", "prod", "queue", "resume", "q2", env=env)
    assert early.exit_code == 0
    assert not paused(prod, "q2")


def _run_on_terminal(args: list[str], env: dict[str, str], answer: str) -> tuple[int, str]:
    """Run ``python -m awa ARGS`` with a pseudo-terminal as stdin and type ``answer``."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "awa", *args],
        stdin=follower,
        stdout=subprocess.PIPE,
        stderr=follower,
        env=env,
    )
    os.close(follower)
    seen = b""
    deadline = time.monotonic() + 60
    try:
        while b"Continue?" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 1.0)
            if ready:
                seen += os.read(leader, 1024)
        os.write(leader, answer.encode())
        proc.wait(timeout=60)
        while True:
            ready, _, _ = select.select([leader], [], [], 0.2)
            if not ready:
                break
            try:
                chunk = os.read(leader, 1024)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(leader)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, seen.decode(errors="replace")


def test_production_gate_asks_on_a_terminal(tmp_path: Path, migrated_database_url: str) -> None:
    path = two_contexts(tmp_path, UNREACHABLE, "unused")
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "AWA_CONTEXT")},
        "AWA_CONFIG": str(path),
        "AWA_TEST_PROD_URL": migrated_database_url,
    }
    args = ["--context", "prod", "queue", "pause", "gated"]
    code, output = _run_on_terminal(args, env, "n\n")
    assert code == 1, output
    assert "will change data in production context 'prod'" in output
    assert "not confirmed; nothing was changed" in output
    assert not paused(migrated_database_url, "gated")
    code, output = _run_on_terminal(args, env, "y\n")
    assert code == 0, output
    assert paused(migrated_database_url, "gated")


# ----------------------------------------------------------------------------- context cmd


def test_context_list_and_show(tmp_path: Path) -> None:
    path = two_contexts(tmp_path, "postgresql://app:S3cr3t@h/local", "unused")
    env = {"AWA_CONFIG": str(path), "AWA_TEST_PROD_URL": "host=db password=Pr0dPw dbname=app"}
    listed = invoke("context", "list", env=env)
    assert listed.exit_code == 0, listed.output
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["CURRENT", "NAME", "DEFAULT", "PRODUCTION", "SOURCE", "TARGET"]
    assert lines[1].split() == ["*", "local", "yes", "no", "url", "postgresql://app@h/local"]
    assert lines[2].split() == ["prod", "yes", "$AWA_TEST_PROD_URL", "host=db", "dbname=app"]
    assert "S3cr3t" not in listed.output and "Pr0dPw" not in listed.output

    as_json = invoke("context", "list", "--json", "--context", "prod", env=env)
    data = json.loads(as_json.stdout)
    assert [c["name"] for c in data["contexts"] if c["current"]] == ["prod"]

    shown = invoke("context", "show", "prod", env=env)
    assert shown.exit_code == 0
    assert ["production", "yes"] in [line.split() for line in shown.stdout.splitlines()]
    assert "the live cluster" in shown.stdout
    default = invoke("context", "show", env=env)
    assert default.stdout.splitlines()[0].split() == ["name", "local"]
    missing = invoke("context", "show", "nope", env=env)
    assert missing.exit_code == 1 and "no context named 'nope'" in missing.stderr
    nothing = invoke("context", "list", env={"AWA_CONFIG": None})
    assert "No contexts defined" in nothing.stdout


def test_global_options_after_the_subcommand() -> None:
    plain = invoke("job", "list", "--database-url", UNREACHABLE)
    assert plain.exit_code == 1 and "awa: error: could not connect" in plain.stderr
    assert "(--database-url)" in plain.stderr
    debug = invoke("job", "list", "--debug", "--database-url", UNREACHABLE)
    assert isinstance(debug.exception, awa.DatabaseError)
    grouped = invoke("job", "--database-url", UNREACHABLE, "list")
    assert "(--database-url)" in grouped.stderr
    helped = invoke("job", "list", "--help")
    assert "--context" not in helped.stdout  # accepted, but documented once at the top
