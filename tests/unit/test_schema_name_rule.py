"""One schema-name rule, kept by the client's validation, the CLI, the storage transition's
prepare gate and the queue-storage engine's statements alike."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from awa.adapters.postgres_queue_storage.statements import Statements
from awa.domain.errors import ValidationError, ValidationTypeError
from awa.domain.transition import Gate, TransitionRefused, TransitionStatus, check_prepare
from awa.domain.validation import (
    MAX_SCHEMA_NAME_LENGTH,
    schema_name_problem,
    validate_schema_name,
)
from awa.entrypoints.cli import cli

GOOD = ["awa", "_", "_x1", "awa_queue_storage", "AwaQS", "q" * MAX_SCHEMA_NAME_LENGTH]
BAD = [
    "",
    "é",  # not ASCII: awa.storage_prepare refuses it
    "awé",
    "1awa",  # leading digit
    "a b",
    "no; drop",
    "a-b",
    "a.b",
    '"awa"',
    'we"ird',
    "awa\n",
    "q" * (MAX_SCHEMA_NAME_LENGTH + 1),  # Postgres would cut it to another name
]


@pytest.mark.parametrize("name", GOOD)
def test_plain_ascii_identifiers_up_to_63_characters_are_schema_names(name: str) -> None:
    assert schema_name_problem(name) is None
    assert validate_schema_name(name) == name
    assert Statements(name).schema == name


@pytest.mark.parametrize("name", BAD)
def test_every_other_name_is_refused_everywhere(name: str) -> None:
    problem = schema_name_problem(name)
    assert problem is not None
    with pytest.raises(ValidationError) as info:
        validate_schema_name(name)
    assert info.value.field == "schema" and info.value.value == name
    assert problem in str(info.value)
    with pytest.raises(ValidationError):
        Statements(name)
    # an empty name means the default schema at prepare, as awa.storage_prepare reads it
    if name:
        with pytest.raises(TransitionRefused) as refused:
            check_prepare(TransitionStatus(), "queue_storage", {"schema": name})
        assert refused.value.gate is Gate.SCHEMA_IS_IDENTIFIER
        assert problem in str(refused.value)


def test_too_long_and_non_ascii_names_say_why() -> None:
    assert "at most 63 characters" in str(schema_name_problem("q" * 64))
    assert "ASCII" in str(schema_name_problem("é"))


@pytest.mark.parametrize("name", [None, 1, b"awa"])
def test_a_non_string_is_a_type_error(name: Any) -> None:
    with pytest.raises(ValidationTypeError, match="must be a string"):
        validate_schema_name(name)


@pytest.mark.parametrize("name", ["é", "1awa", "q" * 64])
def test_the_cli_refuses_the_name_before_connecting(name: str) -> None:
    result = CliRunner().invoke(
        cli,
        [
            *("--database-url", "postgresql://127.0.0.1:1/none", "storage"),
            *("prepare-queue-storage-schema", "--schema", name),
        ],
    )
    assert result.exit_code == 2, result.output
    assert "--schema" in result.output
    assert str(schema_name_problem(name)) in " ".join(result.output.split())
