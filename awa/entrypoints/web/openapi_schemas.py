"""Component schemas and small schema builders of the ``/api/openapi.json`` document."""

from __future__ import annotations

from typing import Any

from awa.domain.batch_ops import BatchOpKind, BatchOpState
from awa.domain.cron import MissedFirePolicy
from awa.domain.held_back import LIMITS as HELD_BACK_LIMITS
from awa.domain.states import JobState
from awa.entrypoints.held_back import LIMIT_FIELDS as LIMIT_SOURCE_FIELDS

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

NUM = {"type": "number"}
NNUM = {"type": "number", "nullable": True}

#: The columns of a job row (``awa.jobs``), as every job answer carries them.
JOB_COLUMNS: dict[str, Any] = {
    "id": INT,
    "kind": STR,
    "queue": STR,
    "args": {},
    "state": {"type": "string", "enum": STATES},
    "priority": INT,
    "original_priority": INT,
    "attempt": INT,
    "max_attempts": INT,
    "run_lease": INT,
    "run_at": NSTR,
    "heartbeat_at": NSTR,
    "deadline_at": NSTR,
    "attempted_at": NSTR,
    "created_at": NSTR,
    "finalized_at": NSTR,
    "tags": array(STR),
    "errors": array(ANY_OBJ),
    "metadata": ANY_OBJ,
    "unique_key": NSTR,
    "unique_states": NINT,
    "callback_id": NSTR,
    "callback_timeout_at": NSTR,
    "callback_filter": NSTR,
    "callback_on_complete": NSTR,
    "callback_on_fail": NSTR,
    "callback_transform": NSTR,
    "progress": {**ANY_OBJ, "nullable": True},
    "queue_descriptor": {**ANY_OBJ, "nullable": True},
    "kind_descriptor": {**ANY_OBJ, "nullable": True},
    # Why a limit holds an available job back now (ADR 0029), on the job list and page.
    "held_back": {
        **obj(
            {
                "limit": {"type": "string", "enum": list(HELD_BACK_LIMITS)},
                "key": NSTR,
                "running": NINT,
                "max_running": NINT,
                "next_admission": NSTR,
                "reason": STR,
            },
            ["limit", "reason"],
        ),
        "nullable": True,
    },
}
JOB_REQUIRED = ["id", "kind", "queue", "state", "priority", "attempt", "max_attempts"]

#: A queue's or kind's descriptor as the flat columns of its list row.
DESCRIPTOR_COLUMNS: dict[str, Any] = {
    "display_name": NSTR,
    "description": NSTR,
    "owner": NSTR,
    "docs_url": NSTR,
    "tags": array(STR),
    "extra": ANY_OBJ,
    "descriptor_last_seen_at": NSTR,
    "descriptor_stale": BOOL,
    "descriptor_mismatch": BOOL,
    "descriptor": {**ANY_OBJ, "nullable": True},
}

QUEUE_CONFIG = obj(
    {
        "mode": NSTR,
        "max_workers": NINT,
        "min_workers": NINT,
        "weight": NINT,
        "global_max_workers": NINT,
        "rate_limit": {**obj({"max_rate": NUM, "burst": INT}), "nullable": True},
        "poll_interval_ms": NINT,
        "deadline_duration_secs": NINT,
        "priority_aging_interval_secs": NINT,
        "claimers": NINT,
        "claim_batch_size": NINT,
        "dlq_enabled": BOOL,
    }
)

SCHEMAS: dict[str, Any] = {
    "Error": obj({"error": STR}, ["error"]),
    "Job": obj(JOB_COLUMNS, JOB_REQUIRED),
    "JobDocument": obj(
        {
            **JOB_COLUMNS,
            "job": ref("Job"),
            "summary": ANY_OBJ,
            "timeline": array(ANY_OBJ),
            "dlq": {
                **obj(
                    {"reason": STR, "dlq_at": NSTR, "original_run_lease": INT},
                    ["reason", "dlq_at", "original_run_lease"],
                ),
                "nullable": True,
            },
        },
        [*JOB_REQUIRED, "job", "summary", "timeline"],
    ),
    "Queue": obj(
        {
            "queue": STR,
            **{state: INT for state in STATES},
            "total_queued": INT,
            "completed_last_hour": INT,
            "lag_seconds": NNUM,
            "paused": BOOL,
            "dlq_depth": INT,
            "rate_limited": INT,
            **DESCRIPTOR_COLUMNS,
        },
        ["queue", "total_queued", "paused", "dlq_depth", *STATES, "descriptor_stale"],
    ),
    "QueueRuntime": obj(
        {
            "queue": STR,
            "instance_count": INT,
            "live_instances": INT,
            "stale_instances": INT,
            "healthy_instances": INT,
            "total_in_flight": INT,
            "in_flight": INT,
            "overflow_held_total": NINT,
            "config": QUEUE_CONFIG,
            "config_mismatch": BOOL,
            "instances": array(ANY_OBJ),
        },
        ["queue", "config", "config_mismatch", "instance_count", "total_in_flight"],
    ),
    "Kind": obj(
        {
            "kind": STR,
            "job_count": INT,
            "queue_count": INT,
            "completed_last_hour": INT,
            **DESCRIPTOR_COLUMNS,
            "handler_missing": BOOL,
        },
        [
            "kind",
            "job_count",
            "queue_count",
            "completed_last_hour",
            "descriptor_stale",
            "handler_missing",
        ],
    ),
    "DlqEntry": obj(
        {
            **JOB_COLUMNS,
            "dlq_reason": STR,
            "dlq_at": NSTR,
            "original_run_lease": INT,
            "job": ref("Job"),
            "reason": STR,
        },
        [*JOB_REQUIRED, "dlq_reason", "dlq_at", "original_run_lease"],
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
    "RuntimeInstance": obj(
        {
            "instance_id": STR,
            "id": STR,
            "hostname": NSTR,
            "pid": NINT,
            "version": STR,
            "storage_capability": NSTR,
            "transition_role": NSTR,
            "started_at": NSTR,
            "last_seen_at": NSTR,
            "live": BOOL,
            "stale": BOOL,
            "leader": BOOL,
            "healthy": BOOL,
            "postgres_connected": BOOL,
            "poll_loop_alive": BOOL,
            "heartbeat_alive": BOOL,
            "maintenance_alive": BOOL,
            "shutting_down": BOOL,
            "snapshot_interval_ms": INT,
            "global_max_workers": NINT,
            "queues": array(
                obj(
                    {
                        "queue": STR,
                        "in_flight": INT,
                        "overflow_held": NINT,
                        "config": QUEUE_CONFIG,
                    },
                    ["queue", "in_flight", "config"],
                )
            ),
        },
        ["instance_id", "last_seen_at", "stale", "healthy", "leader", "queues"],
    ),
    "Runtime": obj(
        {
            **{
                f"{name}{suffix}": INT
                for name in ("total", "live", "stale", "healthy", "leader")
                for suffix in ("_instances", "")
            },
            "instances": array(ref("RuntimeInstance")),
        },
        [
            "total_instances",
            "live_instances",
            "stale_instances",
            "healthy_instances",
            "leader_instances",
            "instances",
        ],
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
    "RelatedJob": obj(
        {
            "id": INT,
            "kind": NSTR,
            "queue": NSTR,
            "state": {"type": "string", "enum": STATES, "nullable": True},
            "dlq": BOOL,
            "satisfied_at": NSTR,
            "failed": BOOL,
            "on_failure": {"type": "string", "enum": ["cancel", "run", "dlq"]},
        },
        ["id", "kind", "queue", "state", "dlq", "satisfied_at", "failed", "on_failure"],
    ),
    "JobRelations": obj(
        {
            "job_id": INT,
            "state": {"type": "string", "enum": STATES},
            "waiting_on": INT,
            "batch": {
                **obj(
                    {
                        "size": INT,
                        "completed": INT,
                        "failed": INT,
                        "cancelled": INT,
                        "pending": INT,
                    },
                    ["size", "completed", "failed", "cancelled", "pending"],
                ),
                "nullable": True,
            },
            "parent_count": INT,
            "child_count": INT,
            "parents": array(ref("RelatedJob")),
            "children": array(ref("RelatedJob")),
            "result": obj(
                {"stored": BOOL, "value": {}, "stored_at": NSTR, "expires_at": NSTR},
                ["stored"],
            ),
        },
        [
            "job_id",
            "state",
            "waiting_on",
            "batch",
            "parent_count",
            "child_count",
            "parents",
            "children",
            "result",
        ],
    ),
    "BatchProgress": obj(
        {
            "batch_id": INT,
            "callback_state": {"type": "string", "enum": STATES, "nullable": True},
            "size": INT,
            "completed": INT,
            "failed": INT,
            "cancelled": INT,
            "pending": INT,
            "finished": BOOL,
        },
        [
            "batch_id",
            "callback_state",
            "size",
            "completed",
            "failed",
            "cancelled",
            "pending",
            "finished",
        ],
    ),
    "WorkflowGraph": obj(
        {
            "job_id": INT,
            "nodes": array(
                obj(
                    {
                        "id": INT,
                        "kind": NSTR,
                        "queue": NSTR,
                        "state": {"type": "string", "enum": STATES, "nullable": True},
                        "dlq": BOOL,
                        "depth": INT,
                    },
                    ["id", "kind", "queue", "state", "dlq", "depth"],
                )
            ),
            "edges": array({**array(INT), "minItems": 2, "maxItems": 2}),
            "truncated": BOOL,
        },
        ["job_id", "nodes", "edges", "truncated"],
    ),
    "QueueKeys": obj(
        {
            "queue": STR,
            "limits": obj(
                {
                    "max_running_per_key": NINT,
                    "rate_limit_per_second": {**NUM, "nullable": True},
                    "rate_limit_burst": NINT,
                    "global_rate_per_second": {**NUM, "nullable": True},
                    "global_rate_burst": NINT,
                    "global_rate_per_key_per_second": {**NUM, "nullable": True},
                    "global_rate_per_key_burst": NINT,
                },
                [
                    "max_running_per_key",
                    "rate_limit_per_second",
                    "rate_limit_burst",
                    "global_rate_per_second",
                    "global_rate_burst",
                    "global_rate_per_key_per_second",
                    "global_rate_per_key_burst",
                ],
            ),
            "limit_sources": obj(
                {field: {**STR, "nullable": True} for field in LIMIT_SOURCE_FIELDS},
                list(LIMIT_SOURCE_FIELDS),
            ),
            "keys": array(
                obj(
                    {"key": STR, "running": INT, "waiting": INT, "held_back": INT},
                    ["key", "running", "waiting", "held_back"],
                )
            ),
        },
        ["queue", "limits", "limit_sources", "keys"],
    ),
    "Count": obj({"count": INT}, ["count"]),
    "CallbackResult": obj(
        {"id": INT, "callback_id": STR, "state": {"type": "string", "enum": STATES}},
        ["id", "state"],
    ),
}
