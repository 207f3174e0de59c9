"""Bulk spec building: options shared by the batch are validated once, every job's args
are still checked and every job derives its own kind."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from awa.domain.errors import ValidationError
from awa.entrypoints.args import build_spec, build_specs


@dataclass
class SendEmail:
    to: str


@dataclass
class ResizeImage:
    width: float


def test_bulk_specs_equal_one_by_one_specs() -> None:
    jobs = [SendEmail(to="a"), ResizeImage(width=2.0), {"x": [1, 2]}]
    common: dict[str, Any] = {"queue": "q", "priority": 3, "tags": ["t"], "metadata": {"m": 1}}
    assert build_specs(jobs, kind=None, **common) == [build_spec(job, **common) for job in jobs]
    # A per-job override still goes through the full path.
    specs = build_specs(jobs, opts=[None, {"queue": "other"}, None], **common)
    assert [spec.queue for spec in specs] == ["q", "other", "q"]
    assert [spec.kind for spec in specs] == ["send_email", "resize_image", "dict"]


def test_every_job_of_a_batch_is_validated() -> None:
    with pytest.raises(ValidationError) as bad:
        build_specs([SendEmail(to="a"), ResizeImage(width=float("nan"))], queue="q")
    assert bad.value.field == "args"
    with pytest.raises(ValidationError) as bad_kind:
        build_specs([SendEmail(to="a"), {"x": 1}], queue="q", kind="")
    assert bad_kind.value.field == "kind"
    # Shared options are validated even when only the first job uses them.
    with pytest.raises(ValidationError) as bad_priority:
        build_specs([SendEmail(to="a"), SendEmail(to="b")], priority=9)
    assert bad_priority.value.field == "priority"
