"""Component schemas and small schema builders of the ``/api/openapi.json`` document."""

from __future__ import annotations

from typing import Any

from awa.domain.batch_ops import BatchOpKind, BatchOpState
from awa.domain.cron import MissedFirePolicy
from awa.domain.states import JobState

STATES = [str(s) for s in JobState]
OP_KINDS = [str(k) for k in BatchOpKind]
OP_STATES = [str(s) for s in BatchOpState]


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(name: str) -> dict[str, Any]:
    return {"allOf": [ref(name)], "nullable": True}


def array(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": item}


def obj(props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = required
    return schema


INT = {"type": "integer"}
STR = {"type": "string"}
NSTR = {"type": "string", "nullable": True}
NINT = {"type": "integer", "nullable": True}
BOOL = {"type": "boolean"}
ANY_OBJ = {"type": "object", "additionalProperties": True}

SCHEMAS: dict[str, Any] = {
    "Error": obj({"error": STR}, ["error"]),
    "Job": obj(
        {
            "id": INT,
            "kind": STR,
            "queue": STR,
            "state": {"type": "string", "enum": STATES},
            "priority": INT,
            "original_priority": INT,
            "attempt": INT,
            "max_attempts": INT,
            "run_lease": INT,
            "run_at": NSTR,
            "created_at": NSTR,
            "finalized_at": NSTR,
            "tags": array(STR),
            "errors": array(ANY_OBJ),
        },
        ["id", "kind", "queue", "state", "priority", "attempt", "max_attempts"],
    ),
    "JobDocument": obj(
        {
            "job": ref("Job"),
            "summary": ANY_OBJ,
            "timeline": array(ANY_OBJ),
            "dlq": {**ANY_OBJ, "nullable": True},
        },
        ["job", "summary", "timeline"],
    ),
    "Queue": obj(
        {
            "queue": STR,
            **{state: INT for state in STATES},
            "total_queued": INT,
            "completed_last_hour": INT,
            "lag_seconds": {"type": "number", "nullable": True},
            "paused": BOOL,
            "dlq_depth": INT,
        },
        ["queue", "total_queued", "paused", "dlq_depth", *STATES],
    ),
    "QueueRuntime": obj(
        {
            "queue": STR,
            "instance_count": INT,
            "in_flight": INT,
            "config_mismatch": BOOL,
            "instances": array(ANY_OBJ),
        },
        ["queue", "config_mismatch"],
    ),
    "Kind": obj(
        {"kind": STR, "job_count": INT, "queue_count": INT, "completed_last_hour": INT},
        ["kind", "job_count", "queue_count", "completed_last_hour"],
    ),
    "DlqEntry": obj(
        {"job": ref("Job"), "reason": STR, "dlq_at": NSTR, "original_run_lease": INT},
        ["job", "reason", "dlq_at"],
    ),
    "DlqDepth": obj(
        {"total": INT, "by_queue": array(obj({"queue": STR, "count": INT}))},
        ["total", "by_queue"],
    ),
    "Stats": {"type": "object", "additionalProperties": INT},
    "Bucket": obj(
        {"bucket": STR, "state": {"type": "string", "enum": STATES}, "count": INT},
        ["bucket", "state", "count"],
    ),
    "Capabilities": obj(
        {
            "read_only": BOOL,
            "read_only_reason": NSTR,
            "replica": {
                **obj(
                    {
                        "streaming": BOOL,
                        "behind_seconds": {"type": "number", "nullable": True},
                        "pending_bytes": INT,
                        "last_replayed_at": NSTR,
                        "summary": STR,
                    },
                    ["streaming", "behind_seconds", "pending_bytes", "summary"],
                ),
                "nullable": True,
            },
            "poll_interval_ms": INT,
            "instance_name": NSTR,
            "instance_color": NSTR,
            "peers": array(obj({"name": STR, "url": STR})),
            "features": {"type": "object", "additionalProperties": BOOL},
        },
        ["read_only", "poll_interval_ms", "peers"],
    ),
    "Runtime": obj(
        {
            "total": INT,
            "live": INT,
            "stale": INT,
            "healthy": INT,
            "leader": INT,
            "instances": array(ANY_OBJ),
        },
        ["total", "live", "stale", "healthy", "leader", "instances"],
    ),
    "CronSchedule": obj(
        {
            "name": STR,
            "cron_expr": STR,
            "timezone": STR,
            "kind": STR,
            "queue": STR,
            "args": {},
            "priority": INT,
            "max_attempts": INT,
            "tags": array(STR),
            "metadata": ANY_OBJ,
            "missed_fire_policy": {"type": "string", "enum": [str(p) for p in MissedFirePolicy]},
            "last_enqueued_at": NSTR,
            "created_at": NSTR,
            "updated_at": NSTR,
            "paused_at": NSTR,
            "paused_by": NSTR,
            "next_fire_at": NSTR,
        },
        ["name", "cron_expr", "timezone", "kind", "queue", "paused_at", "next_fire_at"],
    ),
    "BatchOperation": obj(
        {
            "id": {"type": "string", "format": "uuid"},
            "op_kind": {"type": "string", "enum": OP_KINDS},
            "filter": ANY_OBJ,
            "spec": ANY_OBJ,
            "state": {"type": "string", "enum": OP_STATES},
            "submitted_by": NSTR,
            "submitted_at": STR,
            "started_at": NSTR,
            "finalized_at": NSTR,
            "cursor": {**ANY_OBJ, "nullable": True},
            "total_matched": NINT,
            "processed": INT,
            "skipped": INT,
            "errored": INT,
            "last_error": NSTR,
            "runner_instance": NSTR,
            "retention_until": NSTR,
            "updated_at": STR,
        },
        ["id", "op_kind", "filter", "spec", "state", "submitted_at", "processed"],
    ),
    "BatchPreview": obj(
        {"total_matched": INT, "sample": array(ref("Job"))}, ["total_matched", "sample"]
    ),
    "Ok": obj({"ok": BOOL}, ["ok"]),
    "Drained": obj({"drained": INT}, ["drained"]),
    "Count": obj({"count": INT}, ["count"]),
    "CallbackResult": obj(
        {"id": INT, "callback_id": STR, "state": {"type": "string", "enum": STATES}},
        ["id", "state"],
    ),
}
