"""The bridge's one ``awa.insert_job_compat`` statement, in each driver's placeholder style,
and the bridge's parameters and defaults matching it."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from awa.adapters._pg import insert_compat
from awa.domain.job import DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY, DEFAULT_QUEUE, JobSpec
from awa.entrypoints import bridge

ORDER = (
    "kind",
    "queue",
    "args",
    "state",
    "priority",
    "max_attempts",
    "run_at",
    "metadata",
    "tags",
    "unique_key",
    "unique_states",
    "ordering_key",
)


def test_parameters_follow_the_sql_functions_argument_order() -> None:
    assert insert_compat.parameters() == ORDER


def test_each_style_has_one_placeholder_per_parameter_in_order() -> None:
    dollar = insert_compat.statement("dollar")
    assert re.findall(r"\$(\d+)", dollar) == [str(i + 1) for i in range(len(ORDER))]
    named = insert_compat.statement("named")
    assert re.findall(r"(?<!:):(\w+)", named) == list(ORDER)
    pyformat = insert_compat.statement("pyformat")
    assert pyformat.count("%s") == len(ORDER)
    for text in (dollar, named, pyformat):
        assert "%(" not in text
        assert "awa.insert_job_compat(" in text


def test_the_bridge_prepares_exactly_the_statements_parameters() -> None:
    values = bridge._prepare(
        "insert_job",
        {"x": 1},
        {
            "kind": "k",
            "queue": "q",
            "priority": 1,
            "max_attempts": 3,
            "tags": ["t"],
            "metadata": None,
            "run_at": datetime(2030, 1, 1, tzinfo=UTC),
            "ordering_key": "o",
        },
    )
    assert tuple(values) == ORDER
    assert values["state"] == "scheduled"
    assert values["ordering_key"] == b"o"


def test_a_parameter_set_that_does_not_match_is_refused_before_the_driver() -> None:
    with pytest.raises(ValueError, match=r"missing \['tags'\], unexpected \['tag'\]"):
        insert_compat._positional({**{n: None for n in ORDER if n != "tags"}, "tag": []})


def test_bridge_defaults_are_the_domains() -> None:
    values = bridge._prepare("insert_job", {"x": 1}, {"kind": "k"})
    spec = JobSpec(kind="k")
    assert values["queue"] == DEFAULT_QUEUE == spec.queue
    assert values["priority"] == DEFAULT_PRIORITY == spec.priority
    assert values["max_attempts"] == DEFAULT_MAX_ATTEMPTS == spec.max_attempts


@pytest.mark.anyio
async def test_a_keyword_the_bridge_does_not_take_is_refused_before_the_connection() -> None:
    options: Any = {"kind": "k", "depends_on": [1]}
    with pytest.raises(
        TypeError, match="insert_job\\(\\) got an unexpected keyword argument 'depends_on'"
    ):
        await bridge.insert_job(object(), {"x": 1}, **options)
    with pytest.raises(
        TypeError, match="insert_job_sync\\(\\) got an unexpected keyword argument 'queu'"
    ):
        bridge.insert_job_sync(object(), {"x": 1}, **{"kind": "k", "queu": "q"})  # type: ignore[arg-type]


def test_unknown_connection_types_are_refused() -> None:
    with pytest.raises(TypeError, match="Unsupported connection type: object"):
        insert_compat.driver_of(object())
