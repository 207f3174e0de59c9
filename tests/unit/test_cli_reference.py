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


GLOBAL_OPTIONS = {"--database-url", "--context", "--yes", "--json", "--debug", "--help", "-h"}


def _named_commands() -> list[tuple[str, str]]:
    """Every ``awa ...`` command of README.md and docs/ (page, command text): inline, and
    the lines of shell blocks, including those the docs test does not run."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    span = re.compile(r"`(awa\s[^`]+)`")
    line = re.compile(r"^(?:[A-Z_]+=\S+\s+)*(awa\s[^#\n]*)", re.MULTILINE)
    block = re.compile(r"^```(?:sh|bash|shell)[ \t]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
    named = []
    for page in pages:
        if page == PAGE:
            continue
        text = page.read_text(encoding="utf-8")
        named += [(page.name, " ".join(m.group(1).split())) for m in span.finditer(text)]
        for code in block.findall(text):
            code = code.replace("\\\n", " ")
            named += [(page.name, " ".join(m.group(1).split())) for m in line.finditer(code)]
    return named


def _check(command: click.Command, words: list[str], text: str, problems: list[str]) -> None:
    """Walk ``words`` down the tree: each subcommand (``a|b`` alternatives too) and each
    ``--option`` must exist where the text names it."""
    for position, word in enumerate(words):
        if word.startswith("--"):
            name = word.split("=", 1)[0]
            options = {opt for param in command.params for opt in getattr(param, "opts", ())}
            if name not in options | GLOBAL_OPTIONS:
                problems.append(f"{text}: no option {name}")
            continue
        if not isinstance(command, click.Group):
            continue  # an argument or an option's value
        if any(mark in word for mark in ':/"$'):
            continue  # the value of a global option, such as a URL
        if not word.islower() or not word.replace("-", "").replace("|", "").isalpha():
            return  # a placeholder such as NAME or <id>: nothing more to check
        for alternative in word.split("|"):
            sub = command.commands.get(alternative)
            if sub is None:
                problems.append(f"{text}: no command {alternative!r}")
            else:
                _check(sub, words[position + 1 :], text, problems)
        return


def test_every_awa_command_the_docs_name_exists() -> None:
    named = _named_commands()
    assert len(named) > 50
    problems: list[str] = []
    for page, text in named:
        _check(cli, text.split()[1:], f"{page}: `{text}`", problems)
    assert not problems, "\n".join(problems)


def test_the_docs_check_catches_a_wrong_command() -> None:
    problems: list[str] = []
    _check(cli, ["storage", "prepare", "queue_storage", "--engin", "x"], "t", problems)
    _check(cli, ["job", "list|show"], "t", problems)
    _check(cli, ["--database-url", "postgresql://h/db", "serv"], "t", problems)
    assert problems == ["t: no option --engin", "t: no command 'show'", "t: no command 'serv'"]
