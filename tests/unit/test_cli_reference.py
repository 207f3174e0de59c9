"""docs/cli-reference.md is generated from the command tree and is up to date."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import click

from awa.entrypoints.cli import cli
from awa.entrypoints.cli.reference import render

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "cli-reference.md"
#: String literals that look like variables but are advisory-lock key names.
NOT_VARIABLES = {"AWA_MIGR", "AWA_STOR"}


def test_the_committed_page_is_the_generated_one() -> None:
    assert PAGE.read_text(encoding="utf-8") == render(), (
        "docs/cli-reference.md is out of date: run "
        "`python -m awa.entrypoints.cli.reference --write docs/cli-reference.md`"
    )


def test_check_mode_names_the_fix(tmp_path: Path) -> None:
    stale = tmp_path / "cli-reference.md"
    stale.write_text("# old\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "awa.entrypoints.cli.reference", "--check", str(stale)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 1
    assert "--write" in done.stderr
    fresh = subprocess.run(
        [sys.executable, "-m", "awa.entrypoints.cli.reference", "--check", str(PAGE)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert fresh.returncode == 0, fresh.stderr


def _visible(command: click.Command, path: str) -> list[tuple[str, click.Command]]:
    if command.hidden:
        return []
    found = [(path, command)]
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            found += _visible(sub, f"{path} {name}")
    return found


def test_every_command_and_option_is_on_the_page() -> None:
    page = render()
    commands = _visible(cli, "awa")
    assert len(commands) > 40
    for path, command in commands:
        assert f"## `{path}`" in page, path
        for param in command.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert param.opts[-1] in page, f"{path} {param.opts[-1]}"


def test_every_environment_variable_the_package_reads_is_on_the_page() -> None:
    page = render()
    literal = re.compile(r"[\"']((?:AWA_[A-Z0-9_]+)|DATABASE_URL)[\"']")
    names = {
        name
        for source in (ROOT / "awa").rglob("*.py")
        for name in literal.findall(source.read_text(encoding="utf-8"))
    } - NOT_VARIABLES
    assert {"DATABASE_URL", "AWA_POOLER", "AWA_GC_FREEZE"} <= names
    missing = sorted(name for name in names if f"| `{name}` |" not in page)
    assert not missing, f"add these to awa.entrypoints.cli.reference.ENVIRONMENT: {missing}"
