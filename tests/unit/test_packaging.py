"""Packaging metadata: one version, the declared licence files, the extras users install."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

from click.testing import CliRunner

import awa
from awa.entrypoints.cli import cli
from awa.runtime.config import parse_start_args

ROOT = Path(__file__).resolve().parents[2]


def pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_one_version_everywhere() -> None:
    assert awa.__version__ == importlib.metadata.version("awa-py")
    assert (
        CliRunner().invoke(cli, ["--version"]).stdout.strip() == f"awa, version {awa.__version__}"
    )
    # What a runtime reports in awa.runtime_instances.version.
    assert parse_start_args(None, handler_queues={"q"}).version == awa.__version__


def test_licence_files_match_the_metadata() -> None:
    project = pyproject()["project"]
    assert isinstance(project, dict)
    assert project["license"] == "MIT OR Apache-2.0"
    for name in project["license-files"]:
        assert (ROOT / name).is_file(), name
    assert "Apache License" in (ROOT / "LICENSE-APACHE").read_text()
    assert "MIT License" in (ROOT / "LICENSE-MIT").read_text()


def test_extras_and_the_private_dev_group() -> None:
    data = pyproject()
    project = data["project"]
    assert isinstance(project, dict)
    extras = project["optional-dependencies"]
    assert set(extras) >= {"ui", "otel", "testing", "embedded", "django", "sqlalchemy", "asyncpg"}
    assert "dev" not in extras
    groups = data["dependency-groups"]
    assert isinstance(groups, dict)
    assert any(str(req).startswith("pytest") for req in groups["dev"])
    plugins = importlib.metadata.entry_points(group="pytest11")
    assert [e.value for e in plugins if e.name == "awa"] == ["awa.testing.plugin"]
